//! include/gauge.h is what cbindgen generates from the crate now (regenerate with
//! `GAUGE_WRITE_HEADER=1 cargo test --release -p gauge-capi --test header`).

use std::path::PathBuf;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = crate_dir.join("include/gauge.h");
    if std::env::var_os("GAUGE_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("writing include/gauge.h");
    }
    let checked_in = std::fs::read_to_string(&path).expect("include/gauge.h");
    assert!(
        checked_in == generated,
        "include/gauge.h is stale: regenerate it with \
         GAUGE_WRITE_HEADER=1 cargo test --release -p gauge-capi --test header"
    );
    for f in [
        "gauge_sampler_init_penalties",
        "gauge_sampler_init_json",
        "gauge_sampler_error",
        "gauge_last_error",
        "gauge_request_fields",
        "gauge_llama_sampler_i_size",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}
