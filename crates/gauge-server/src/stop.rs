//! Stop strings over streamed text.
//!
//! Text arrives a token at a time, and a stop string may span several tokens, so text that could
//! still become a stop string is held back: after each piece, the longest suffix of the held text
//! that is a prefix of some stop string stays held, the rest is released. A full match releases
//! the text before it and ends generation; the stop string itself is never sent (as OpenAI and
//! llama-server do).
//!
//! Only the held suffix is kept, never the whole output: a match that starts in text already
//! released is impossible, because such text would have been a stop-string prefix and so held.

/// Stop-string state of one sequence.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// Empty strings are ignored (they would match everywhere).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Add `piece`; append the text that can be released to `out`. Returns the index (in the
    /// list given to `new`, empties removed) of the stop string that matched, if one did; the
    /// text after the match is dropped.
    pub fn push(&mut self, piece: &str, out: &mut String) -> Option<usize> {
        if self.stops.is_empty() {
            out.push_str(piece);
            return None;
        }
        self.held.push_str(piece);
        // Earliest match wins; on a tie, the first stop string in the list.
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|p| (p, i)))
            .min();
        if let Some((pos, i)) = hit {
            out.push_str(&self.held[..pos]);
            self.held.clear();
            return Some(i);
        }
        let keep = self.partial_suffix();
        let cut = self.held.len() - keep;
        out.push_str(&self.held[..cut]);
        self.held.drain(..cut);
        None
    }

    /// Generation ended without a match: release what is held.
    pub fn finish(&mut self, out: &mut String) {
        out.push_str(&self.held);
        self.held.clear();
    }

    /// Stop string `k` (an index returned by [`StopMatcher::push`]).
    pub fn word(&self, k: usize) -> &str {
        self.stops.get(k).map_or("", String::as_str)
    }

    /// Bytes held back now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Length of the longest suffix of `held` that is a proper prefix of a stop string.
    fn partial_suffix(&self) -> usize {
        let h = self.held.as_bytes();
        let mut best = 0;
        for s in &self.stops {
            let s = s.as_bytes();
            let max = (s.len() - 1).min(h.len());
            for n in (best + 1..=max).rev() {
                if h[h.len() - n..] == s[..n] {
                    best = n;
                    break;
                }
            }
        }
        // A byte prefix of a stop string that ends inside a character of `held` cannot happen
        // (both are valid UTF-8 and the suffix starts where a stop string starts), but stay safe.
        while !self.held.is_char_boundary(self.held.len() - best) {
            best -= 1;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, Option<usize>, String) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut outs = Vec::new();
        for p in pieces {
            let mut out = String::new();
            if let Some(i) = m.push(p, &mut out) {
                outs.push(out);
                return (outs, Some(i), String::new());
            }
            outs.push(out);
        }
        let mut tail = String::new();
        m.finish(&mut tail);
        (outs, None, tail)
    }

    #[test]
    fn stop_string_split_across_tokens_is_held_then_dropped() {
        let (outs, hit, _) = run(&["END"], &["Hello E", "N", "D more"]);
        assert_eq!(outs, ["Hello ", "", ""]);
        assert_eq!(hit, Some(0));
    }

    #[test]
    fn held_prefix_that_does_not_complete_is_released() {
        let (outs, hit, tail) = run(&["END"], &["a E", "Nx", "y"]);
        assert_eq!(outs, ["a ", "ENx", "y"]);
        assert_eq!(hit, None);
        assert_eq!(tail, "");
    }

    #[test]
    fn text_before_a_match_in_the_same_piece_is_released() {
        let (outs, hit, _) = run(&["\n\n", "User:"], &["ok", " fine\n\nUser: hi"]);
        assert_eq!(outs, ["ok", " fine"]);
        assert_eq!(hit, Some(0));
    }

    #[test]
    fn earliest_match_wins_over_list_order() {
        let (outs, hit, _) = run(&["b", "a"], &["xab"]);
        assert_eq!(outs, ["x"]);
        assert_eq!(hit, Some(1));
    }

    #[test]
    fn held_text_is_flushed_at_the_end() {
        let (outs, hit, tail) = run(&["STOP"], &["go ST"]);
        assert_eq!(outs, ["go "]);
        assert_eq!((hit, tail.as_str()), (None, "ST"));
    }

    #[test]
    fn no_stop_strings_pass_everything_through() {
        let (outs, hit, tail) = run(&[], &["a", "b"]);
        assert_eq!(outs, ["a", "b"]);
        assert_eq!((hit, tail.as_str()), (None, ""));
        let (outs, _, _) = run(&[""], &["a"]);
        assert_eq!(outs, ["a"]);
    }

    #[test]
    fn multibyte_stop_strings_match_across_pieces() {
        let (outs, hit, _) = run(&["é!"], &["café", "!"]);
        assert_eq!(outs, ["caf", ""]);
        assert_eq!(hit, Some(0));
    }
}
