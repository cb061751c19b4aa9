//! Give libgauge.so the soname `libgauge.so`, so programs linked against it record that name
//! (found through their rpath or LD_LIBRARY_PATH) rather than the path it was linked from.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgauge.so");
    }
}
