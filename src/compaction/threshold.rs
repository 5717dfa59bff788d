//! When threshold compaction should run (spec §4.2), as a pure function of the figures.

use crate::session::Usage;

/// `contextTokens > contextWindow - reserve`. A window of 0 means "unknown" and never
/// compacts (the reference compacts on every turn then, spec §13 #10).
pub fn should_compact(context_tokens: u64, context_window: u64, reserve: u64) -> bool {
    context_window > 0 && context_tokens > context_window.saturating_sub(reserve)
}

/// The context size a provider reported: `totalTokens`, or the sum of its parts when that is
/// 0 (`calculateContextTokens`, spec §4.7).
pub fn context_tokens_from_usage(usage: &Usage) -> u64 {
    usage.context_tokens()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_above_window_minus_reserve() {
        assert!(should_compact(95_000, 100_000, 10_000));
        assert!(!should_compact(89_000, 100_000, 10_000));
        assert!(!should_compact(90_000, 100_000, 10_000));
        assert!(should_compact(183_617, 200_000, 16_384));
        assert!(!should_compact(183_616, 200_000, 16_384));
    }

    #[test]
    fn unknown_window_never_compacts() {
        assert!(!should_compact(1_000_000, 0, 16_384));
        // A reserve larger than the window compacts on anything above zero.
        assert!(should_compact(1, 1_000, 16_384));
    }

    #[test]
    fn usage_falls_back_to_the_sum() {
        let u = Usage {
            input: 10,
            output: 5,
            cache_read: 100,
            cache_write: 1,
            ..Default::default()
        };
        assert_eq!(context_tokens_from_usage(&u), 116);
        let u = Usage {
            total_tokens: 7,
            ..u
        };
        assert_eq!(context_tokens_from_usage(&u), 7);
    }
}
