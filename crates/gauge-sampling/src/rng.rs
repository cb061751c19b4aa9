//! Random numbers exactly as llama.cpp built with GCC/libstdc++ draws them.
//!
//! llama.cpp uses `std::mt19937` and the standard distributions, whose algorithms the C++ standard
//! leaves open. Token-identical seeded sampling against a Linux build therefore means reproducing
//! libstdc++: `uniform_real_distribution<double>` takes two 32-bit draws (`generate_canonical<double,
//! 53>`), the float form takes one, and `discrete_distribution` normalises in f64, forces the last
//! partial sum to 1 and returns the first index whose partial sum is `>= u`.

/// llama.cpp's `LLAMA_DEFAULT_SEED`: "pick a random seed".
pub const DEFAULT_SEED: u32 = 0xFFFF_FFFF;

/// The 32-bit Mersenne Twister, `std::mt19937`.
#[derive(Clone, Debug)]
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    /// `std::mt19937(seed)` (standard `init_genrand`).
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Self { state, index: 624 }
    }

    /// The reference MT19937 `init_by_array(key)` seeding (Matsumoto and Nishimura's 2002 code,
    /// which CPython's `random.Random` uses): the instrument's bootstrap reproduces Python's draws
    /// with it. `key` must not be empty.
    pub fn from_key(key: &[u32]) -> Self {
        assert!(!key.is_empty(), "init_by_array needs a non-empty key");
        const N: usize = 624;
        let mut mt = Self::new(19_650_218);
        let s = &mut mt.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = s[i - 1];
            s[i] = (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = s[i - 1];
            s[i] =
                (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
        }
        s[0] = 0x8000_0000;
        mt
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        for i in 0..624 {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % 624] & LOWER);
            let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.state[i] = v;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `std::uniform_real_distribution<double>(0, 1)(rng)`: two draws, the first is the low half.
    pub fn uniform_f64(&mut self) -> f64 {
        let lo = self.next_u32() as f64;
        let hi = self.next_u32() as f64;
        let r = (lo + hi * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        if r >= 1.0 {
            // nextafter(1.0, 0.0)
            f64::from_bits(1.0f64.to_bits() - 1)
        } else {
            r
        }
    }

    /// `std::uniform_real_distribution<float>(0, 1)(rng)`: one draw, rounded to f32 first.
    pub fn uniform_f32(&mut self) -> f32 {
        let r = self.next_u32() as f32 / 4_294_967_296.0f32;
        if r >= 1.0 {
            f32::from_bits(1.0f32.to_bits() - 1)
        } else {
            r
        }
    }

    /// `std::discrete_distribution<int>(weights)(rng)` as libstdc++ implements it.
    ///
    /// Fewer than two weights return 0 without drawing. Otherwise the weights are summed in f64
    /// (array order), each is divided by the sum, the partial sums are taken with the last forced to
    /// 1.0, and the result is `lower_bound(cp, u)` for one uniform double `u`.
    ///
    /// For finite non-negative weights with a positive sum the partial sums are non-decreasing, so a
    /// linear scan finds the same index as the binary search without storing them (the hot path,
    /// no allocation). Anything else (NaN, infinities, negative or all-zero weights, which a `+inf`
    /// logit bias can produce) makes the partial sums non-monotone; then libstdc++'s
    /// `lower_bound` probes are replayed exactly over a materialised table.
    pub fn discrete(&mut self, weights: impl ExactSizeIterator<Item = f32> + Clone) -> usize {
        let n = weights.len();
        if n < 2 {
            return 0;
        }
        let mut sum = 0.0f64;
        let mut well_formed = true;
        for w in weights.clone() {
            if !w.is_finite() || w < 0.0 {
                well_formed = false;
            }
            sum += w as f64;
        }
        let u = self.uniform_f64();
        if !well_formed || sum <= 0.0 {
            return discrete_lower_bound_exact(weights, sum, u);
        }
        let mut acc = 0.0f64;
        for (i, w) in weights.enumerate() {
            if i + 1 == n {
                return i;
            }
            acc += w as f64 / sum;
            if acc >= u {
                return i;
            }
        }
        n - 1
    }
}

/// The general form of `discrete`: libstdc++'s `std::lower_bound` over the partial sums, probe for
/// probe, so that non-monotone tables (NaN or infinite weights) give the index GCC's build gives.
#[cold]
fn discrete_lower_bound_exact(
    weights: impl ExactSizeIterator<Item = f32>,
    sum: f64,
    u: f64,
) -> usize {
    let mut cp: Vec<f64> = Vec::with_capacity(weights.len());
    let mut acc = 0.0f64;
    for (i, w) in weights.enumerate() {
        let q = w as f64 / sum;
        acc = if i == 0 { q } else { acc + q };
        cp.push(acc);
    }
    if let Some(last) = cp.last_mut() {
        *last = 1.0;
    }
    // `__lower_bound` with `*it < u`: halve the range, keep the right half only when the probe is
    // strictly less than `u` (NaN probes compare false and send the search left).
    let mut first = 0usize;
    let mut len = cp.len();
    while len > 0 {
        let half = len >> 1;
        let mid = first + half;
        if cp[mid] < u {
            first = mid + 1;
            len = len - half - 1;
        } else {
            len = half;
        }
    }
    first
}

/// llama.cpp's `get_rng_seed`: `DEFAULT_SEED` becomes a fresh random seed, anything else is kept.
pub fn resolve_seed(seed: u32) -> u32 {
    if seed != DEFAULT_SEED {
        return seed;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::Mt19937;

    /// The first outputs of Matsumoto and Nishimura's `mt19937ar.out` (the reference program's
    /// output for `init_by_array({0x123, 0x234, 0x345, 0x456})`).
    #[test]
    fn from_key_matches_the_reference_program() {
        let mut mt = Mt19937::from_key(&[0x123, 0x234, 0x345, 0x456]);
        let got: Vec<u32> = (0..5).map(|_| mt.next_u32()).collect();
        assert_eq!(
            got,
            [
                1_067_595_299,
                955_945_823,
                477_289_528,
                4_107_218_783,
                4_228_976_476
            ]
        );
    }
}
