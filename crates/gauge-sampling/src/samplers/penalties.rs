//! `penalties`: repeat, frequency and presence penalties over a window of accepted tokens.
//!
//! # Semantics
//!
//! The `ctrl` mode is llama.cpp's `llama_sampler_penalties` bit for bit: the window holds the last
//! `last_n` accepted tokens with their counts, and every candidate whose id has `count > 0` gets
//!
//! ```text
//! logit = logit <= 0 ? logit * repeat : logit / repeat      // note `<= 0`
//! logit -= float(count) * freq + float(count > 0) * present // f32, this operation order
//! ```
//!
//! then `sorted = false`. The repeat step reads the sign of a *raw* logit, a coordinate softmax
//! ignores, so the same model shifted by a constant is penalised differently (see [`crate::gauge`]).
//!
//! The `normalized` mode first moves the whole row to log-probability coordinates,
//! `ℓ = log_softmax(z)` over the full current candidate set, and then multiplies `ℓ` by `repeat` for
//! every seen token. Every `ℓ <= 0`, so there is no sign branch: `p ↦ p^θ` before renormalisation,
//! the same on every model and at every shift. Unseen tokens keep `ℓ`, a constant shift of their raw
//! logits that every later shift-invariant stage ignores. The log-sum-exp is accumulated in f64
//! (the terms `exp(z - max)` in f32) so that `ℓ` is as exact as f32 can hold it: an f32 sum over a
//! 262k-entry row would lose several bits. With `repeat == 1` the log-softmax would only add a
//! constant to the row, so it is skipped and the stage is the plain subtraction.
//!
//! Frequency and presence are subtractive, hence shift-invariant in both modes.
//!
//! # Deliberate differences from llama.cpp
//!
//! * `Window::All` (`-1`) means the whole history. llama.cpp clamps `-1` to `0`, which silently
//!   turns the penalty off (docs/SPEC.md §4, upstream issue #25388).
//! * `count_prompt = false` ignores the tokens fed through `accept_prompt`; `once_per_token` counts a
//!   token at most once for the frequency penalty; `exempt` ids are never penalised (they still take
//!   their place in the window). With `count_prompt = true`, `once_per_token = false` and no
//!   exemptions the stage is llama.cpp's.
//!
//! # Cost
//!
//! llama.cpp looks up every candidate in a hash map: O(vocab) per token. Here `ctrl` iterates the
//! distinct seen tokens and finds each in the array directly when the array is in identity layout
//! (`data[id].id == id`, which is how `llama_sampler_sample` fills it), so `apply` is O(history).
//! When the ids ascend instead (a grammar's mask removed entries but kept the id order), an O(len)
//! vectorised check and a binary search per seen token replace the map lookups (~5× cheaper at
//! 49k). When any seen token is not at its identity position and the ids do not ascend (the
//! stage runs after a reordering stage) it falls back to llama.cpp's own walk over the candidates with a map lookup each: O(len), the
//! same cost as building an id→index map, with no scratch memory, and exact even for arrays with
//! duplicate ids. (The fast path assumes ids are unique, which holds for every array a chain
//! produces.) In a chain, `apply_sparse` does the same work as edits over the raw row, so the
//! stage never needs a filled array at all.
//!
//! `normalized` needs the whole row and is O(vocab): one vectorised pass for the max and the
//! log-sum-exp together (see [`max_log_sum_exp`]), one write pass; about 0.27 ns per entry with
//! AVX-512 on the reference machine (41 µs at 151,936), against 0.46 ns for the two passes it
//! replaced and several ns with libm `expf` and a serial sum. In a chain the
//! write pass is not made: `apply_sparse` records the log-softmax as a pending overlay transform
//! (`(z - max) - lse` per entry), which the next dense stage applies as it reads the row.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::candidates::{Candidates, TokenData, TokenId};
use crate::kernels::compact::compact_kept;
use crate::kernels::lse::{data_max_lse, row_max_lse};
use crate::kernels::reduce::current_values;
use crate::overlay::{Overlay, Transform, MAX_TRANSFORMS};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Which operator the repeat penalty uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PenaltyMode {
    /// llama.cpp / HF / vLLM / CTRL: `z <= 0 ? z*θ : z/θ` on raw logits. Not shift-invariant.
    #[default]
    Ctrl,
    /// Log-softmax over the full row first, then `ℓ*θ` for every seen token. Shift-invariant.
    Normalized,
}

/// How many recent tokens count as "seen".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last `n` accepted tokens; `Last(0)` disables the stage (llama.cpp's `0`).
    Last(usize),
    /// The whole history (`-1`). llama.cpp clamps `-1` to 0 and silently disables the penalty;
    /// gauge means what the user asked for.
    All,
}

impl Window {
    /// From llama.cpp's integer convention, with gauge's meaning for `-1`.
    /// Values below -1 are rejected by parameter validation before this is called.
    pub fn from_i32(n: i32) -> Window {
        if n < 0 {
            Window::All
        } else {
            Window::Last(n as usize)
        }
    }
    /// True for `Last(0)` (the stage is off).
    pub fn is_disabled(self) -> bool {
        self == Window::Last(0)
    }
}

/// Configuration of the `penalties` stage.
#[derive(Clone, Debug, PartialEq)]
pub struct PenaltiesConfig {
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Penalty window.
    pub last_n: Window,
    /// Repeat penalty θ (`1` = off).
    pub repeat: f32,
    /// Frequency penalty.
    pub freq: f32,
    /// Presence penalty.
    pub present: f32,
    /// How the repeat penalty is applied.
    pub mode: PenaltyMode,
    /// Whether tokens accepted through `accept_prompt` count as seen (llama.cpp: yes).
    pub count_prompt: bool,
    /// Count each token at most once for the frequency penalty (membership only).
    pub once_per_token: bool,
    /// Token ids the penalties never touch (e.g. JSON delimiters).
    pub exempt: Vec<TokenId>,
}

/// A cheap hasher for token ids (a multiply and a fold). The maps it serves hold at most one entry
/// per distinct token of a window and are probed once per history token, so SipHash's
/// DoS-resistance buys nothing and costs most of the lookup.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
    #[inline]
    fn write_i32(&mut self, x: i32) {
        self.write_u64(u64::from(x as u32));
    }
}

/// A map keyed by token id with [`IdHasher`].
pub(crate) type IdMap<V> = HashMap<TokenId, V, BuildHasherDefault<IdHasher>>;

/// Index of `id` in `data` when the array is in identity layout at that id (`data[id].id == id`).
#[inline]
pub(crate) fn identity_index(data: &[TokenData], id: TokenId) -> Option<usize> {
    let i = usize::try_from(id).ok()?;
    (data.get(i)?.id == id).then_some(i)
}

/// Whether the ids strictly ascend (a filtered identity layout, as a grammar mask leaves it).
/// No early exit, so the pass vectorises: a few µs for a 49k array.
fn ids_ascend(data: &[TokenData]) -> bool {
    data.windows(2).fold(true, |ok, w| ok & (w[0].id < w[1].id))
}

/// Call `f(entry, value)` for every candidate whose id is a key of `map`: in O(map) when every key
/// sits at its identity position, in O(map · log len) after an O(len) check when the ids ascend,
/// and with a map lookup per candidate otherwise (see the module docs).
pub(crate) fn for_each_keyed<V: Copy>(
    data: &mut [TokenData],
    map: &IdMap<V>,
    mut f: impl FnMut(&mut TokenData, V),
) {
    if map.keys().all(|&id| identity_index(data, id).is_some()) {
        for (&id, &v) in map {
            // Checked just above; `usize::try_from` cannot fail for these ids.
            f(&mut data[id as usize], v);
        }
    } else if map.len() < data.len() / 64 && ids_ascend(data) {
        // Unique ascending ids: a binary search finds a key exactly when it is present.
        for (&id, &v) in map {
            if let Ok(i) = data.binary_search_by_key(&id, |t| t.id) {
                f(&mut data[i], v);
            }
        }
    } else {
        for t in data.iter_mut() {
            if let Some(&v) = map.get(&t.id) {
                f(t, v);
            }
        }
    }
}

/// llama.cpp's sign-branched repeat penalty on one raw logit: divide when positive, multiply when
/// `<= 0` (so 0 is a fixed point and a negative logit moves away from 0, i.e. down).
#[inline]
pub fn ctrl_penalize(z: f32, theta: f32) -> f32 {
    if z <= 0.0 {
        z * theta
    } else {
        z / theta
    }
}

/// The normalized repeat penalty on one log-probability `ℓ <= 0`: `ℓ*θ`, i.e. `p ↦ p^θ` before
/// renormalisation. No branch is needed because `ℓ` is never positive.
#[inline]
pub fn normalized_penalize(l: f32, theta: f32) -> f32 {
    l * theta
}

/// The amount the frequency and presence penalties subtract for a token seen `count` times,
/// with llama.cpp's f32 operation order: `float(count)*freq + float(count > 0)*present`.
#[inline]
pub fn subtractive_amount(count: u32, freq: f32, present: f32) -> f32 {
    count as f32 * freq + f32::from(u8::from(count > 0)) * present
}

/// The value of a seen token after the whole stage, from its value `v` in the stage's coordinates
/// (the raw logit for `Ctrl`, the log-probability for `Normalized`) and its frequency `count`:
/// the repeat operator of `mode`, then [`subtractive_amount`]. The one definition every caller
/// uses: the stage's dense and sparse paths, and gauge-lab's instrument.
#[inline]
pub fn penalize_seen(
    mode: PenaltyMode,
    v: f32,
    repeat: f32,
    count: u32,
    freq: f32,
    present: f32,
) -> f32 {
    let r = match mode {
        PenaltyMode::Ctrl => ctrl_penalize(v, repeat),
        PenaltyMode::Normalized => normalized_penalize(v, repeat),
    };
    r - subtractive_amount(count, freq, present)
}

/// `log_softmax` of a row in place: `ℓ_i = (z_i - max) - ln Σ exp(z_j - max)`.
///
/// The differences and their `exp` are f32, the sum and the log are f64 (see the module docs).
/// `-inf` entries stay `-inf`. A row with no finite value (or an empty row) is left unchanged,
/// since it has no log-probabilities.
pub fn log_softmax_inplace(row: &mut [f32]) {
    let (max, lse) = row_max_lse(row, 0.0);
    if !max.is_finite() {
        return;
    }
    for z in row.iter_mut() {
        *z = shifted_log_prob(*z, max, lse);
    }
}

/// The largest `v + shift` over `values` and `ln Σ exp((v + shift) - max)`, with f32 terms and an
/// f64 sum (>= 0, since the max's term is 1), in one read of the row. The log-sum-exp means
/// nothing when the max is not finite (an empty row, every entry `-inf`, or a `+inf`).
///
/// This is the whole cost of the normalized mode, so it runs as a dispatched kernel: terms by an
/// FMA polynomial against a running max, summed in 16 f64 lanes, small terms four at a time in
/// f32 first (the exact order is in `kernels::lse`, whose tests bound its error). The same bits
/// on every instruction set, and the same as the stage computes on the row or on a candidate
/// array.
///
/// Public so that gauge-lab's instrument sums exactly as the stage users run does (its
/// cross-check compares the two bit for bit); `shift` is the instrument's constant added to a row.
pub fn max_log_sum_exp(values: &[f32], shift: f32) -> (f32, f64) {
    row_max_lse(values, shift)
}

/// One log-probability from the row's max and [`max_log_sum_exp`]: `(z - max) - lse`, the
/// difference in f32, the subtraction of `lse` in f64, rounded once to f32. Monotone in `z`.
#[inline]
pub fn shifted_log_prob(z: f32, max: f32, lse: f64) -> f32 {
    (f64::from(z - max) - lse) as f32
}

/// The `penalties` stage.
#[derive(Clone, Debug)]
pub struct Penalties {
    cfg: PenaltiesConfig,
    /// The window, oldest first. Only kept for `Window::Last` (eviction needs the order).
    ring: VecDeque<TokenId>,
    /// Count of every non-exempt token inside the window; entries are removed at 0.
    counts: IdMap<u32>,
    /// The row's current values, when normalized mode must sum a row that already carries edits.
    values: Vec<f32>,
    /// The current values before compaction, when earlier stages left edits or transforms.
    scratch: Vec<f32>,
    /// The sparse ctrl path's ids in the row, their counts, values and penalised values.
    batch: Batch,
}

/// [`Penalties::apply_sparse`]'s ctrl batch, one array per field so the penalty loop vectorises
/// (a vector select, not a branch on each value's sign).
#[derive(Clone, Debug, Default)]
struct Batch {
    ids: Vec<u32>,
    counts: Vec<u32>,
    now: Vec<f32>,
    new: Vec<f32>,
}

/// Build the stage as llama.cpp's init does (a `?penalties` placeholder when disabled).
pub fn build(cfg: PenaltiesConfig) -> Box<dyn Sampler> {
    if cfg.last_n.is_disabled() || (cfg.repeat == 1.0 && cfg.freq == 0.0 && cfg.present == 0.0) {
        return Placeholder::boxed("?penalties");
    }
    Box::new(Penalties::new(cfg))
}

impl Penalties {
    /// The active stage, even for a configuration llama.cpp would turn into a placeholder (use
    /// [`build`] for llama.cpp's behaviour), for callers that need the concrete type.
    pub fn new(mut cfg: PenaltiesConfig) -> Self {
        cfg.exempt.sort_unstable();
        cfg.exempt.dedup();
        Penalties {
            cfg,
            ring: VecDeque::new(),
            counts: IdMap::default(),
            values: Vec::new(),
            scratch: Vec::new(),
            batch: Batch::default(),
        }
    }

    #[inline]
    fn is_exempt(&self, token: TokenId) -> bool {
        !self.cfg.exempt.is_empty() && self.cfg.exempt.binary_search(&token).is_ok()
    }

    fn count_in(&mut self, token: TokenId) {
        if !self.is_exempt(token) {
            *self.counts.entry(token).or_insert(0) += 1;
        }
    }

    fn count_out(&mut self, token: TokenId) {
        if self.is_exempt(token) {
            return;
        }
        if let Some(c) = self.counts.get_mut(&token) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&token);
            }
        }
    }

    /// The count the frequency penalty uses.
    #[inline]
    fn freq_count(once_per_token: bool, count: u32) -> u32 {
        if once_per_token {
            count.min(1)
        } else {
            count
        }
    }

    /// The ctrl operator (also the normalized one at θ = 1) on one seen logit.
    #[inline]
    fn penalize_ctrl(&self, z: f32, count: u32) -> f32 {
        let c = &self.cfg;
        penalize_seen(
            PenaltyMode::Ctrl,
            z,
            c.repeat,
            Self::freq_count(c.once_per_token, count),
            c.freq,
            c.present,
        )
    }

    /// Whether `apply` needs the whole row (normalized mode with θ != 1).
    fn is_dense(&self) -> bool {
        self.cfg.mode == PenaltyMode::Normalized && self.cfg.repeat != 1.0
    }

    fn apply_ctrl(&mut self, cur: &mut Candidates) {
        let this = &*self;
        for_each_keyed(cur.as_mut_slice(), &this.counts, |t, count| {
            t.logit = this.penalize_ctrl(t.logit, count);
        });
    }

    fn apply_normalized(&mut self, cur: &mut Candidates) {
        let data = cur.as_mut_slice();
        let (max, lse) = data_max_lse(data);
        if !max.is_finite() {
            // Empty, every candidate banned, or a +inf (from a bias) that takes all the mass:
            // there are no finite log-probabilities to penalise.
            return;
        }
        for t in data.iter_mut() {
            t.logit = shifted_log_prob(t.logit, max, lse);
        }
        let (repeat, freq, present, once) = (
            self.cfg.repeat,
            self.cfg.freq,
            self.cfg.present,
            self.cfg.once_per_token,
        );
        for_each_keyed(data, &self.counts, |t, count| {
            let n = Self::freq_count(once, count);
            t.logit = penalize_seen(PenaltyMode::Normalized, t.logit, repeat, n, freq, present);
        });
    }
}

impl Penalties {
    /// `apply_normalized` on "row + overlay": the log-softmax over the current values is recorded
    /// as a pending [`Transform::LogProb`] (the same max, the same sum in the same order, so the
    /// same f32 per entry), and the seen tokens become edits after it. `false` (nothing recorded)
    /// when no transform slot is free.
    fn normalized_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        if ov.n_transforms() >= MAX_TRANSFORMS {
            return false;
        }
        let values: &[f32] = if ov.keep_mask().is_some() {
            // an allowed set: the filled array holds only those entries, in id order, and the
            // max and log-sum-exp are over that array (its lanes too), so compact the values
            // (`has_transforms` counts the allowed set itself, which the compaction applies)
            if ov.has_edits() || ov.n_transforms() > 0 {
                ov.prepare();
                current_values(row, ov, &mut self.scratch);
                let bits = ov.keep_mask().unwrap_or_default();
                compact_kept(&self.scratch, bits, &mut self.values);
            } else {
                let bits = ov.keep_mask().unwrap_or_default();
                compact_kept(row, bits, &mut self.values);
            }
            &self.values
        } else if ov.has_edits() || ov.has_transforms() {
            ov.prepare();
            current_values(row, ov, &mut self.values);
            &self.values
        } else {
            row
        };
        let (max, lse) = row_max_lse(values, 0.0);
        if !max.is_finite() {
            // As `apply_normalized`: nothing to penalise (the row check reports a +inf).
            return true;
        }
        if !ov.push_transform(Transform::LogProb { max, lse }) {
            return false;
        }
        let c = &self.cfg;
        for (&id, &count) in &self.counts {
            if let Some(i) = usize::try_from(id).ok().filter(|&i| i < row.len()) {
                let n = Self::freq_count(c.once_per_token, count);
                let v = penalize_seen(
                    PenaltyMode::Normalized,
                    ov.get(row, i),
                    c.repeat,
                    n,
                    c.freq,
                    c.present,
                );
                ov.set(i, v);
            }
        }
        true
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &str {
        "penalties"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        // With θ = 1 the normalized operator is the plain subtraction up to a constant, and
        // `ctrl_penalize(z, 1)` is exact, so both modes share the O(history) path.
        if self.is_dense() {
            self.apply_normalized(cur);
        } else {
            self.apply_ctrl(cur);
        }
        cur.sorted = false;
    }

    /// The chain's sparse path: the stage's effect on the freshly filled identity layout, held as
    /// "row + edits" (see `crate::overlay`), with the same f32 results as `apply`, in
    /// O(history) and without filling; normalized mode with θ != 1 adds one read of the row (its
    /// max and log-sum-exp) and records the log-softmax as a pending transform.
    /// Ids outside the row are skipped, as no candidate carries them.
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        if self.is_dense() {
            return self.normalized_sparse(row, ov);
        }
        // In three loops: every value loaded first (the row is not in cache yet at this stage,
        // and a branch on each loaded value's sign, mispredicted half the time, discarded the
        // loads issued after it: 0.4 µs per token with 64 ids), the penalty over the batch, then
        // the edits, each only if it changes a bit (as `Overlay::update`).
        let Batch {
            ids,
            counts,
            now,
            new,
        } = &mut self.batch;
        ids.clear();
        counts.clear();
        for (&id, &count) in &self.counts {
            if let Some(i) = u32::try_from(id).ok().filter(|&i| (i as usize) < row.len()) {
                ids.push(i);
                counts.push(count);
            }
        }
        now.clear();
        now.extend(ids.iter().map(|&i| ov.get(row, i as usize)));
        new.clear();
        let c = &self.cfg;
        new.extend(now.iter().zip(counts.iter()).map(|(&z, &count)| {
            let n = Self::freq_count(c.once_per_token, count);
            penalize_seen(PenaltyMode::Ctrl, z, c.repeat, n, c.freq, c.present)
        }));
        for ((&i, &z), &v) in ids.iter().zip(now.iter()).zip(new.iter()) {
            if v.to_bits() != z.to_bits() {
                ov.set(i as usize, v);
            }
        }
        true
    }

    fn accept(&mut self, token: TokenId) {
        match self.cfg.last_n {
            Window::All => self.count_in(token),
            // An empty window (only reachable through `Penalties::new`) records nothing.
            Window::Last(0) => {}
            Window::Last(n) => {
                if self.ring.len() >= n {
                    if let Some(old) = self.ring.pop_front() {
                        self.count_out(old);
                    }
                }
                self.ring.push_back(token);
                self.count_in(token);
            }
        }
    }

    fn accept_prompt(&mut self, token: TokenId) {
        if self.cfg.count_prompt {
            self.accept(token);
        }
    }

    fn reset(&mut self) {
        self.ring.clear();
        self.counts.clear();
    }

    fn shift(&self) -> Shift {
        if self.cfg.mode == PenaltyMode::Ctrl && self.cfg.repeat != 1.0 {
            Shift::Variant("sign branch on raw logits")
        } else {
            Shift::Invariant
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(last_n: Window, repeat: f32, freq: f32, present: f32) -> PenaltiesConfig {
        PenaltiesConfig {
            n_vocab: 4,
            last_n,
            repeat,
            freq,
            present,
            mode: PenaltyMode::Ctrl,
            count_prompt: true,
            once_per_token: false,
            exempt: vec![],
        }
    }

    fn run(c: PenaltiesConfig, history: &[TokenId], logits: &[f32]) -> Vec<f32> {
        let mut s = build(c);
        for &t in history {
            s.accept(t);
        }
        let mut cur = Candidates::from_logits(logits);
        s.apply(&mut cur);
        let mut out = vec![0.0; logits.len()];
        for t in cur.as_slice() {
            out[t.id as usize] = t.logit;
        }
        out
    }

    #[test]
    fn window_evicts_oldest_and_keeps_counts() {
        // Window of 2 over [0, 1, 1]: token 0 has left, token 1 counts twice.
        let out = run(
            cfg(Window::Last(2), 1.0, 1.0, 0.0),
            &[0, 1, 1],
            &[1.0, 1.0, 1.0, 1.0],
        );
        assert_eq!(out, vec![1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn empty_window_records_nothing() {
        let mut s = Penalties::new(cfg(Window::Last(0), 1.0, 1.0, 1.0));
        for t in [0, 0, 1] {
            s.accept(t);
        }
        let mut cur = Candidates::from_logits(&[1.0, 1.0]);
        s.apply(&mut cur);
        assert_eq!(cur.as_slice()[0].logit, 1.0);
        assert_eq!(cur.as_slice()[1].logit, 1.0);
    }

    #[test]
    fn zero_logit_is_a_fixed_point_of_the_repeat_step() {
        assert_eq!(ctrl_penalize(0.0, 2.0), 0.0);
        assert_eq!(ctrl_penalize(-1.0, 2.0), -2.0);
        assert_eq!(ctrl_penalize(1.0, 2.0), 0.5);
    }

    #[test]
    fn reordered_array_takes_the_lookup_path_with_the_same_result() {
        let logits = [0.5, -0.25, 2.0, 1.0];
        let mut s = build(cfg(Window::All, 1.5, 0.25, 0.5));
        for t in [2, 2, 1] {
            s.accept(t);
        }
        let mut direct = Candidates::from_logits(&logits);
        s.apply(&mut direct);
        let mut rev: Vec<TokenData> = Candidates::from_logits(&logits).as_slice().to_vec();
        rev.reverse();
        let mut reordered = Candidates::from_data(rev, false);
        s.apply(&mut reordered);
        for t in reordered.as_slice() {
            assert_eq!(
                t.logit.to_bits(),
                direct.as_slice()[t.id as usize].logit.to_bits()
            );
        }
    }

    #[test]
    fn masked_ascending_array_takes_the_search_path_with_the_same_result() {
        // A grammar-like mask: a third of the ids removed, the id order kept. Some seen tokens
        // are masked out (absent from the array), the rest must get the identity layout's bits.
        let n = 4096;
        let logits: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 211) as f32 * 0.1 - 9.0)
            .collect();
        let mut c = cfg(Window::All, 1.3, 0.25, 0.5);
        c.n_vocab = n;
        let mut s = build(c);
        for t in [3, 9, 9, 10, 500, 501, 4095, 2048, 2049, 7] {
            s.accept(t);
        }
        let mut direct = Candidates::from_logits(&logits);
        s.apply(&mut direct);
        let kept: Vec<TokenData> = Candidates::from_logits(&logits)
            .as_slice()
            .iter()
            .filter(|t| t.id % 3 != 0)
            .copied()
            .collect();
        assert!(
            ids_ascend(&kept) && 9 < kept.len() / 64,
            "the search path is taken"
        );
        let mut shuffled = kept.clone();
        shuffled.swap(0, kept.len() - 1);
        assert!(!ids_ascend(&shuffled), "the map walk's control case");
        for data in [kept, shuffled] {
            let mut masked = Candidates::from_data(data.clone(), false);
            s.apply(&mut masked);
            let mut changed = 0;
            for (t, before) in masked.as_slice().iter().zip(&data) {
                let want = direct.as_slice()[t.id as usize].logit;
                assert_eq!(t.logit.to_bits(), want.to_bits(), "id {}", t.id);
                changed += usize::from(t.logit != before.logit);
            }
            assert_eq!(changed, 4, "the seen ids the mask kept: 7, 10, 500, 2048");
        }
    }

    #[test]
    fn prompt_tokens_are_ignored_when_count_prompt_is_false() {
        let mut c = cfg(Window::All, 1.0, 0.0, 1.0);
        c.count_prompt = false;
        let mut s = build(c);
        s.accept_prompt(0);
        s.accept(1);
        let mut cur = Candidates::from_logits(&[1.0, 1.0]);
        s.apply(&mut cur);
        assert_eq!(cur.as_slice()[0].logit, 1.0);
        assert_eq!(cur.as_slice()[1].logit, 0.0);
    }

    #[test]
    fn once_per_token_caps_the_frequency_count_at_one() {
        let mut c = cfg(Window::All, 1.0, 1.0, 0.0);
        c.once_per_token = true;
        let out = run(c, &[0, 0, 0], &[1.0, 1.0]);
        assert_eq!(out, vec![0.0, 1.0]);
    }

    #[test]
    fn overlay_path_gives_the_same_bits_as_apply() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 41) as f32 * 0.37 - 6.0)
            .collect();
        let history = [3, 0, 5, 5, 36, 12, 3, 3, 40, -1, 9];
        for (mode, repeat) in [
            (PenaltyMode::Ctrl, 1.3),
            (PenaltyMode::Normalized, 1.0),
            (PenaltyMode::Normalized, 1.3),
        ] {
            let mut c = cfg(Window::Last(8), repeat, 0.25, 0.5);
            c.mode = mode;
            c.exempt = vec![9];
            let mut a = Penalties::new(c);
            for t in history {
                a.accept(t);
            }
            crate::samplers::testing::assert_sparse_matches_dense(&a, &row);
        }
    }

    /// ctrl records no edit that changes nothing: seen ids an allowed set removed read `-inf`
    /// and stay so, so they get none (each edit costs the readers a span with an edit in it),
    /// while the allowed seen ids get theirs.
    #[test]
    fn ctrl_leaves_removed_ids_unedited() {
        let row: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 8.0).collect();
        let mut pen = Penalties::new(cfg(Window::All, 1.3, 0.0, 0.0));
        for t in [3, 40, 41] {
            pen.accept(t);
        }
        let mut ov = Overlay::default();
        ov.reset(row.len());
        // ids 32..64 allowed: 3 removed, 40 and 41 kept
        assert!(ov.keep_only(&[0, u32::MAX]));
        assert!(pen.apply_sparse(&row, &mut ov));
        assert!(!ov.is_edited(3));
        assert!(ov.is_edited(40) && ov.is_edited(41));
        assert_eq!(ov.get(&row, 3), f32::NEG_INFINITY);
        assert_eq!(ov.get(&row, 40), ctrl_penalize(row[40], 1.3));
    }

    /// Normalized mode after other sparse stages: it sums the current values (an earlier edit, a
    /// pending division), not the raw row, and declines when no transform slot is left.
    #[test]
    fn normalized_overlay_path_sums_what_earlier_stages_left() {
        let row: Vec<f32> = (0..53)
            .map(|i| ((i * 31) % 17) as f32 * 0.9 - 4.0)
            .collect();
        let mut pen = Penalties::new(PenaltiesConfig {
            mode: PenaltyMode::Normalized,
            ..cfg(Window::All, 1.3, 0.1, 0.2)
        });
        for t in [4, 4, 9, 52, 0] {
            pen.accept(t);
        }
        let earlier = |ov: &mut Overlay| {
            ov.reset(row.len());
            ov.set(7, 30.0); // a logit bias
            assert!(ov.push_transform(Transform::Div(0.5)));
        };
        // The reference: the same earlier effects filled, then `apply`.
        let mut ov = Overlay::default();
        earlier(&mut ov);
        let mut cur = Candidates::new();
        ov.materialize(&row, &mut cur);
        pen.clone().apply(&mut cur);
        earlier(&mut ov);
        assert!(pen.clone().apply_sparse(&row, &mut ov));
        let mut via = Candidates::new();
        ov.materialize(&row, &mut via);
        let bits = |c: &Candidates| -> Vec<u32> {
            c.as_slice().iter().map(|t| t.logit.to_bits()).collect()
        };
        assert_eq!(bits(&via), bits(&cur));
        for i in 0..row.len() {
            assert_eq!(
                ov.get(&row, i).to_bits(),
                cur.as_slice()[i].logit.to_bits(),
                "id {i}"
            );
        }
        // Every slot taken: declined, nothing recorded.
        earlier(&mut ov);
        assert!(ov.push_transform(Transform::Div(2.0)));
        assert!(ov.push_transform(Transform::Div(3.0)));
        assert!(!pen.clone().apply_sparse(&row, &mut ov));
        assert_eq!(ov.n_transforms(), 3);
    }

    #[test]
    fn log_softmax_sums_to_one_and_keeps_bans() {
        let mut row = [3.0f32, 1.0, f32::NEG_INFINITY, -2.0];
        log_softmax_inplace(&mut row);
        let s: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert_eq!(row[2], f32::NEG_INFINITY);
        assert!(row.iter().all(|&l| l <= 0.0));
    }
}
