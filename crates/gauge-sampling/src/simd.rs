//! Which instruction set the row kernels run on, chosen at run time.
//!
//! The crate is compiled for baseline x86_64 (SSE2), so one binary, `libgauge` and the Python wheel
//! run on any x86_64 CPU. The kernels that read the whole row are compiled a second and a third
//! time with AVX2 (x86-64-v3) and AVX-512 (x86-64-v4) enabled, and every call picks the best one
//! the CPU has (`level`). Every version computes the same IEEE operations in the same order
//! (Rust never contracts `a * b + c` into an FMA, and the hand-written AVX2/AVX-512 loops use only
//! the operations the portable code uses), so the results are bit-identical on every level; the
//! tests force each level the machine can run in turn and compare bits.
//!
//! `GAUGE_SIMD=baseline|avx2|avx512` in the environment caps the level (read once, on first use),
//! e.g. to compare speeds or to rule the vector paths out when debugging. Other architectures run
//! the portable code (on aarch64 that is already NEON, which the target always has).

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level for the row kernels, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// The target's baseline (SSE2 on x86_64); the only level elsewhere.
    Baseline = 0,
    /// AVX2 + FMA + BMI1/2 + LZCNT (x86-64-v3).
    Avx2 = 1,
    /// AVX-512 F/BW/DQ/VL on top of AVX2 (x86-64-v4).
    Avx512 = 2,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 3] = [Level::Baseline, Level::Avx2, Level::Avx512];

    /// The level's name as `GAUGE_SIMD` and the bench records spell it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    fn from_u8(x: u8) -> Level {
        match x {
            2 => Level::Avx512,
            1 => Level::Avx2,
            _ => Level::Baseline,
        }
    }
}

/// The best level this CPU supports, ignoring `GAUGE_SIMD`.
pub fn supported() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = has!("avx2")
            && has!("fma")
            && has!("bmi1")
            && has!("bmi2")
            && has!("lzcnt")
            && has!("popcnt");
        if v3 && has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
            return Level::Avx512;
        }
        if v3 {
            return Level::Avx2;
        }
    }
    Level::Baseline
}

/// `UNSET` until the first call of [`detected`].
static DETECTED: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = u8::MAX;

/// The level the kernels use: [`supported`], capped by `GAUGE_SIMD` when it names a level.
/// Detected once; later calls are one relaxed load.
pub fn detected() -> Level {
    let x = DETECTED.load(Ordering::Relaxed);
    if x != UNSET {
        return Level::from_u8(x);
    }
    let mut l = supported();
    if let Ok(cap) = std::env::var("GAUGE_SIMD") {
        if let Some(c) = Level::ALL.into_iter().find(|c| c.name() == cap.trim()) {
            l = l.min(c);
        }
    }
    DETECTED.store(l as u8, Ordering::Relaxed);
    l
}

crate::simd::multiversion! {
/// One read of a row at the current `level`: its largest entry, the loop the row kernels'
/// first pass makes. `gauge bench sampling` times it as the `one-read` row, the floor every
/// chain that reads the whole row is measured against.
pub fn one_read<I>(row: &[f32]) -> f32 {
    I::span_max(row, &mut false)
}
}

/// The levels this machine can run (the baseline and up to [`supported`]).
pub fn available() -> Vec<Level> {
    let top = supported();
    Level::ALL.into_iter().filter(|&l| l <= top).collect()
}

/// The level a kernel call runs on now: the forced one on this thread (`testing` feature), else
/// [`detected`].
#[inline]
pub(crate) fn level() -> Level {
    #[cfg(feature = "testing")]
    if let Some(l) = testing::FORCED.with(|f| f.get()) {
        return l;
    }
    detected()
}

/// Count one dispatched call at `l` (the `testing` feature's counters; nothing otherwise).
#[inline(always)]
pub(crate) fn count(_l: Level) {
    #[cfg(feature = "testing")]
    testing::RUNS.with(|r| {
        let mut v = r.get();
        v[_l as usize] += 1;
        r.set(v);
    });
}

/// Forcing a level and counting which level ran, per thread, for the tests that run every
/// exactness check on every level the machine has.
#[cfg(feature = "testing")]
pub mod testing {
    use super::Level;
    use std::cell::Cell;

    thread_local! {
        pub(super) static FORCED: Cell<Option<Level>> = const { Cell::new(None) };
        pub(super) static RUNS: Cell<[u64; 3]> = const { Cell::new([0; 3]) };
    }

    /// Run the kernels on this thread at `level` (`None`: back to [`super::detected`]).
    /// Panics if the CPU cannot run `level`.
    pub fn force(level: Option<Level>) {
        if let Some(l) = level {
            assert!(l <= super::supported(), "this CPU cannot run {}", l.name());
        }
        FORCED.with(|f| f.set(level));
    }

    /// How many dispatched kernel calls ran on this thread at each level (indexed by `Level as
    /// usize`).
    pub fn runs() -> [u64; 3] {
        RUNS.with(|r| r.get())
    }
}

/// Define `pub fn $name(args) -> R` that runs `$body` compiled for the best [`level`] (the body is
/// an `#[inline(always)]` function, so it and the helpers it inlines are compiled once per level
/// and the compiler vectorises each for its instruction set).
///
/// The generic form, `fn name<I>(..)`, also hands the body its level as a type
/// (`kernels::mask::Isa`), for the primitives the compiler does not find on its own (a compare
/// into a bit mask).
macro_rules! multiversion {
    (
        $(#[$m:meta])*
        $vis:vis fn $name:ident<$isa:ident>($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block
    ) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn body<$isa: $crate::kernels::mask::Isa>($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
                fn v4($($arg: $ty),*) -> $ret { body::<$crate::kernels::mask::Avx512>($($arg),*) }
                #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
                fn v3($($arg: $ty),*) -> $ret { body::<$crate::kernels::mask::Avx2>($($arg),*) }
                let l = $crate::simd::level();
                $crate::simd::count(l);
                match l {
                    // SAFETY: `level()` only returns a level `supported()` found on this CPU
                    // (`testing::force` refuses others), so the enabled features are present.
                    $crate::simd::Level::Avx512 => return unsafe { v4($($arg),*) },
                    // SAFETY: as above.
                    $crate::simd::Level::Avx2 => return unsafe { v3($($arg),*) },
                    $crate::simd::Level::Baseline => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            $crate::simd::count($crate::simd::Level::Baseline);
            body::<$crate::kernels::mask::Portable>($($arg),*)
        }
    };
    // the plain form: the generic one with a level type the body does not use
    (
        $(#[$m:meta])*
        $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block
    ) => {
        $crate::simd::multiversion! {
            $(#[$m])*
            $vis fn $name<UnusedIsa>($($arg: $ty),*) -> $ret $body
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_stable_and_within_what_the_cpu_supports() {
        assert!(detected() <= supported());
        assert_eq!(detected(), detected());
        assert_eq!(available()[0], Level::Baseline);
        assert_eq!(*available().last().unwrap(), supported());
    }
}
