use super::*;
use crate::test_support::*;
use troupe_config::CompactionConfig;

#[test]
fn usable_with_input_limit_uses_default_reserve() {
    // max_output = min(64_000, 32_000) = 32_000; reserve = min(20_000, 32_000) = 20_000.
    let m = model(200_000, Some(150_000), 64_000);
    assert_eq!(usable_context(&m, &CompactionConfig::default()), 130_000);
    // Small output limit: reserve = min(20_000, 8_000) = 8_000.
    let m = model(200_000, Some(150_000), 8_000);
    assert_eq!(usable_context(&m, &CompactionConfig::default()), 142_000);
    // Explicit reserve wins.
    let cfg = CompactionConfig {
        reserved: Some(50_000),
        ..Default::default()
    };
    assert_eq!(
        usable_context(&model(200_000, Some(150_000), 64_000), &cfg),
        100_000
    );
}

#[test]
fn usable_without_input_limit_subtracts_max_output() {
    // 128_000 − min(16_384, 32_000)
    assert_eq!(
        usable_context(&model(128_000, None, 16_384), &CompactionConfig::default()),
        111_616
    );
    // Unknown output limit → 32_000.
    assert_eq!(
        usable_context(&model(128_000, None, 0), &CompactionConfig::default()),
        96_000
    );
    // Unknown context → 0.
    assert_eq!(
        usable_context(&model(0, Some(100), 10), &CompactionConfig::default()),
        0
    );
}

#[test]
fn overflow_boundary_with_input_limit() {
    let m = model(200_000, Some(150_000), 64_000); // usable 130_000
    let cfg = CompactionConfig::default();
    let mut t = Tokens {
        input: 100_000,
        output: 10_000,
        reasoning: 5_000,
        cache: crate::types::CacheTokens {
            read: 10_000,
            write: 5_000,
        },
    };
    assert_eq!(t.total(), 130_000);
    assert!(is_overflow(&t, &m, &cfg), "exactly at usable overflows");
    t.input -= 1;
    assert!(!is_overflow(&t, &m, &cfg), "one below does not");
    // Reasoning counts: moving one token back as reasoning overflows again.
    t.reasoning += 1;
    assert!(is_overflow(&t, &m, &cfg));
}

#[test]
fn overflow_boundary_without_input_limit() {
    let m = model(128_000, None, 16_384); // usable 111_616
    let cfg = CompactionConfig::default();
    let at = Tokens {
        input: 111_000,
        output: 616,
        ..Default::default()
    };
    assert!(is_overflow(&at, &m, &cfg));
    let below = Tokens {
        input: 111_000,
        output: 615,
        ..Default::default()
    };
    assert!(!is_overflow(&below, &m, &cfg));
}

#[test]
fn overflow_never_when_auto_off_unknown_context_or_no_room() {
    let at = Tokens {
        input: 130_000,
        ..Default::default()
    };
    let off = CompactionConfig {
        auto: false,
        ..Default::default()
    };
    assert!(!is_overflow(
        &at,
        &model(200_000, Some(150_000), 64_000),
        &off
    ));
    let huge = Tokens {
        input: 10_000_000,
        ..Default::default()
    };
    assert!(!is_overflow(
        &huge,
        &model(0, None, 0),
        &CompactionConfig::default()
    ));
    // input 10_000 − reserve 20_000 saturates to 0 → never (documented deviation).
    let tiny = model(16_000, Some(10_000), 0);
    assert_eq!(usable_context(&tiny, &CompactionConfig::default()), 0);
    assert!(!is_overflow(&huge, &tiny, &CompactionConfig::default()));
}
