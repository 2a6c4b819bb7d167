//! Usage → tokens and cost (pure; OpenCode `Session.getUsage`, opencode-engine.md §10).
//!
//! Providers report *inclusive* counts (input includes cache read/write, output includes
//! reasoning). Stored tokens are *exclusive* per category; cost is
//! `(input·p_in + output·p_out + reasoning·p_out + cache_read·p_cr + cache_write·p_cw) / 1e6`
//! in decimal arithmetic, with the price tier chosen per step from that step's total input.

use rust_decimal::Decimal;
use troupe_config::{ModelCost, Prices};

use crate::types::{CacheTokens, Tokens};

/// Inclusive usage of one step as the provider reported it, tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepUsage {
    /// All input tokens, including cache read and write.
    pub input: u64,
    /// All output tokens, including reasoning.
    pub output: u64,
    /// Reasoning tokens (part of `output`).
    pub reasoning: u64,
    /// Cache-read tokens (part of `input`).
    pub cache_read: u64,
    /// Cache-write tokens (part of `input`).
    pub cache_write: u64,
}

/// Split inclusive usage into exclusive [`Tokens`] and price it. `cost = None` prices at 0.
pub fn usage_cost(u: StepUsage, cost: Option<&ModelCost>) -> (Tokens, Decimal) {
    let tokens = Tokens {
        input: u
            .input
            .saturating_sub(u.cache_read)
            .saturating_sub(u.cache_write),
        output: u.output.saturating_sub(u.reasoning),
        reasoning: u.reasoning,
        cache: CacheTokens {
            read: u.cache_read,
            write: u.cache_write,
        },
    };
    let Some(cost) = cost else {
        return (tokens, Decimal::ZERO);
    };
    let prices = tier_for(cost, u.input);
    let d = Decimal::from;
    let total = d(tokens.input) * prices.input
        + d(tokens.output) * prices.output
        + d(tokens.reasoning) * prices.output
        + d(tokens.cache.read) * prices.cache_read
        + d(tokens.cache.write) * prices.cache_write;
    (tokens, (total / Decimal::from(1_000_000u64)).normalize())
}

/// The price tier for a step whose total input (incl. cache) is `context_tokens`: the tier
/// with the largest `size` below it, else the base prices.
pub fn tier_for(cost: &ModelCost, context_tokens: u64) -> &Prices {
    cost.tiers
        .iter()
        .filter(|t| context_tokens > t.size)
        .max_by_key(|t| t.size)
        .map(|t| &t.prices)
        .unwrap_or(&cost.base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;
    use troupe_config::CostTier;

    fn prices(i: Decimal, o: Decimal, cr: Decimal, cw: Decimal) -> Prices {
        Prices {
            input: i,
            output: o,
            cache_read: cr,
            cache_write: cw,
        }
    }

    #[test]
    fn openai_with_cached_tokens() {
        // gpt-4.1: $2 in, $8 out, $0.50 cached. 10,000 prompt tokens of which 4,000 cached,
        // 500 completion tokens: 6,000×2 + 500×8 + 4,000×0.5 = 12,000 + 4,000 + 2,000 = 18,000 → $0.018
        let c = ModelCost {
            base: prices(dec!(2), dec!(8), dec!(0.5), dec!(0)),
            tiers: vec![],
        };
        let (t, cost) = usage_cost(
            StepUsage {
                input: 10_000,
                output: 500,
                cache_read: 4_000,
                ..Default::default()
            },
            Some(&c),
        );
        assert_eq!(t.input, 6_000);
        assert_eq!(t.cache.read, 4_000);
        assert_eq!(cost, dec!(0.018));
    }

    #[test]
    fn anthropic_cache_read_and_write() {
        // sonnet: $3 in, $15 out, $0.30 read, $3.75 write. Anthropic input_tokens 1,000
        // (exclusive) + read 20,000 + write 5,000 → inclusive input 26,000; output 2,000.
        // 1,000×3 + 2,000×15 + 20,000×0.3 + 5,000×3.75 = 3,000+30,000+6,000+18,750 = 57,750 → $0.05775
        let c = ModelCost {
            base: prices(dec!(3), dec!(15), dec!(0.3), dec!(3.75)),
            tiers: vec![],
        };
        let u = StepUsage {
            input: 26_000,
            output: 2_000,
            reasoning: 0,
            cache_read: 20_000,
            cache_write: 5_000,
        };
        let (t, cost) = usage_cost(u, Some(&c));
        assert_eq!(t.input, 1_000);
        assert_eq!(cost, dec!(0.05775));
    }

    #[test]
    fn over_200k_tier_chosen_per_step() {
        let c = ModelCost {
            base: prices(dec!(3), dec!(15), dec!(0.3), dec!(3.75)),
            tiers: vec![CostTier {
                size: 200_000,
                prices: prices(dec!(6), dec!(22.5), dec!(0.6), dec!(7.5)),
            }],
        };
        // 250,000 input, 1,000 output, 500 of it reasoning: 250,000×6 + 500×22.5 + 500×22.5 = 1,500,000 + 22,500 → $1.5225
        let u = StepUsage {
            input: 250_000,
            output: 1_000,
            reasoning: 500,
            ..Default::default()
        };
        let (_, cost) = usage_cost(u, Some(&c));
        assert_eq!(cost, dec!(1.5225));
        // exactly 200,000 stays on the base tier: 200,000×3 = $0.6
        let (_, cost) = usage_cost(
            StepUsage {
                input: 200_000,
                ..Default::default()
            },
            Some(&c),
        );
        assert_eq!(cost, dec!(0.6));
    }

    #[test]
    fn no_prices_costs_nothing_and_never_underflows() {
        let (t, cost) = usage_cost(
            StepUsage {
                input: 5,
                output: 1,
                reasoning: 3,
                cache_read: 9,
                cache_write: 0,
            },
            None,
        );
        assert_eq!(cost, Decimal::ZERO);
        assert_eq!(t.input, 0);
        assert_eq!(t.output, 0);
    }
}
