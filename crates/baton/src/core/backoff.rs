//! Retry delays (§2.7, §3.6 `_get_retry_delay`) and deterministic jitter.

use std::time::Duration;

use crate::spec::RetryPolicy;

/// Delay before the retry that follows `failures` failed normal attempts (1-based).
///
/// `min(base * exp^(failures-1), max)`, then multiplied by `0.5 + u` when jitter is on, where `u`
/// in `[0, 1)` is the caller's deterministic jitter sample.
pub fn retry_delay(policy: &RetryPolicy, failures: u32, jitter_u: f64) -> Duration {
    let index = failures.saturating_sub(1);
    let exp = if policy.exponential_base.is_finite() && policy.exponential_base >= 1.0 {
        policy.exponential_base
    } else {
        1.0
    };
    let max = policy.max_delay.as_secs_f64();
    let raw = policy.base_delay.as_secs_f64() * exp.powi(i32::try_from(index).unwrap_or(i32::MAX));
    let mut secs = if raw.is_finite() { raw.min(max) } else { max };
    if policy.jitter {
        secs *= 0.5 + jitter_u.clamp(0.0, 1.0);
    }
    crate::time::secs(secs)
}

/// A pseudo-random sample in `[0, 1)` that is a pure function of its inputs, so retries are
/// reproducible in tests yet spread across jobs and sheets in production.
pub fn jitter_sample(seed: u64, job_id: &str, sheet_num: u32, attempt: u32) -> f64 {
    // FNV-1a over the job id, then SplitMix64 finalisation.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ seed ^ (u64::from(sheet_num) << 32) ^ u64::from(attempt);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Circuit-breaker recovery delay (\[LATER\] §2.2): `min(base * 2^max(0, failures - threshold), max)`.
pub fn breaker_recovery_delay(
    base: Duration,
    max: Duration,
    consecutive_failures: u32,
    threshold: u32,
) -> Duration {
    let extra = consecutive_failures.saturating_sub(threshold).min(20);
    base.saturating_mul(1u32 << extra).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            jitter,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn delays_double_and_cap() {
        let p = policy(false);
        assert_eq!(retry_delay(&p, 1, 0.0), Duration::from_secs(10));
        assert_eq!(retry_delay(&p, 2, 0.0), Duration::from_secs(20));
        assert_eq!(retry_delay(&p, 3, 0.0), Duration::from_secs(40));
        assert_eq!(retry_delay(&p, 30, 0.0), Duration::from_secs(3600));
    }

    #[test]
    fn policy_is_read_not_hard_coded() {
        let p = RetryPolicy {
            base_delay: Duration::from_secs(3),
            exponential_base: 3.0,
            max_delay: Duration::from_secs(20),
            jitter: false,
            ..RetryPolicy::default()
        };
        assert_eq!(retry_delay(&p, 1, 0.0), Duration::from_secs(3));
        assert_eq!(retry_delay(&p, 2, 0.0), Duration::from_secs(9));
        assert_eq!(retry_delay(&p, 3, 0.0), Duration::from_secs(20));
    }

    #[test]
    fn jitter_is_deterministic_and_bounded() {
        let a = jitter_sample(7, "job", 3, 1);
        assert_eq!(a, jitter_sample(7, "job", 3, 1));
        assert_ne!(a, jitter_sample(7, "job", 4, 1));
        for i in 0..1000 {
            let u = jitter_sample(1, "j", i, i);
            assert!((0.0..1.0).contains(&u));
            let d = retry_delay(&policy(true), 1, u);
            assert!(d >= Duration::from_secs(5) && d < Duration::from_secs(15));
        }
    }

    #[test]
    fn breaker_recovery_grows_to_cap() {
        let b = Duration::from_secs(30);
        let m = Duration::from_secs(300);
        assert_eq!(breaker_recovery_delay(b, m, 5, 5), Duration::from_secs(30));
        assert_eq!(breaker_recovery_delay(b, m, 6, 5), Duration::from_secs(60));
        assert_eq!(breaker_recovery_delay(b, m, 9, 5), Duration::from_secs(300));
        assert_eq!(
            breaker_recovery_delay(b, m, 500, 5),
            Duration::from_secs(300)
        );
    }
}
