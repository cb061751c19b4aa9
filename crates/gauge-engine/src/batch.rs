//! Batch planning: which queued tokens go into which `llama_decode` call, at which positions, and
//! which of them produce a logit row.
//!
//! Kept apart from the FFI so the rules are unit-tested without a model:
//! - every queued token of every sequence is evaluated in one `step`, in sequence order, each
//!   sequence's tokens consecutive and in order;
//! - a token's position is the sequence's length before the step plus its index in the queue;
//! - only the last queued token of a sequence asks for logits (llama.cpp computes the output
//!   projection only for flagged tokens, so a prefill of 500 tokens costs one row, not 500);
//! - the plan is cut into chunks of at most `n_batch` tokens, decoded in order. A sequence may
//!   straddle two chunks; that is fine because positions are explicit and chunks run in order.

use gauge_sampling::TokenId;

/// One token of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanEntry {
    /// llama.cpp sequence id (the slot).
    pub slot: usize,
    pub token: TokenId,
    pub pos: i32,
    /// Whether this token's logit row is wanted.
    pub logits: bool,
}

/// Append the plan for one sequence: `pending` tokens after `n_past` evaluated ones.
pub(crate) fn plan_sequence(
    slot: usize,
    n_past: usize,
    pending: &[TokenId],
    out: &mut Vec<PlanEntry>,
) {
    let last = pending.len().saturating_sub(1);
    out.extend(pending.iter().enumerate().map(|(j, &token)| PlanEntry {
        slot,
        token,
        pos: (n_past + j) as i32,
        logits: j == last,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_queued_token_of_each_sequence_asks_for_logits() {
        let mut plan = Vec::new();
        plan_sequence(0, 5, &[10, 11, 12], &mut plan);
        plan_sequence(3, 0, &[7], &mut plan);
        assert_eq!(
            plan,
            [
                PlanEntry {
                    slot: 0,
                    token: 10,
                    pos: 5,
                    logits: false
                },
                PlanEntry {
                    slot: 0,
                    token: 11,
                    pos: 6,
                    logits: false
                },
                PlanEntry {
                    slot: 0,
                    token: 12,
                    pos: 7,
                    logits: true
                },
                PlanEntry {
                    slot: 3,
                    token: 7,
                    pos: 0,
                    logits: true
                },
            ]
        );
    }

    #[test]
    fn chunks_keep_each_sequence_in_order_across_the_cut() {
        let mut plan = Vec::new();
        plan_sequence(1, 0, &[1, 2, 3, 4, 5], &mut plan);
        plan_sequence(2, 9, &[6, 7], &mut plan);
        let chunks: Vec<Vec<(usize, i32, bool)>> = plan
            .chunks(3)
            .map(|c| c.iter().map(|e| (e.slot, e.pos, e.logits)).collect())
            .collect();
        assert_eq!(
            chunks,
            [
                vec![(1, 0, false), (1, 1, false), (1, 2, false)],
                vec![(1, 3, false), (1, 4, true), (2, 9, false)],
                vec![(2, 10, true)],
            ]
        );
    }

    #[test]
    fn an_empty_queue_plans_nothing() {
        let mut plan = Vec::new();
        plan_sequence(0, 3, &[], &mut plan);
        assert!(plan.is_empty());
    }
}
