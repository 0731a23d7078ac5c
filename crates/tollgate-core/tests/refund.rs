//! `refund`: giving back an admitted request's cost undoes its charge for
//! every later decision, is capped at a fresh key, and follows the key's
//! clock like a charge does.

mod common;

use common::{algorithm, quota, shape, Key};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// After `decide(t, c)` admits and `refund(t, c)` gives it back, the key
    /// decides every later request (at `t` or after) exactly as if the
    /// request had never come.
    #[test]
    fn refund_undoes_a_charge(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(30),
        undo in any::<prop::sample::Index>(),
    ) {
        let trace = shape.resolve(&quota);
        // Undo one of the charges, chosen among those the trace admits.
        let mut probe = Key::new(algorithm, &quota);
        let charges: Vec<usize> = (0..trace.len())
            .filter(|&i| {
                let (t, c) = trace[i];
                probe.decide(&quota, t, c).1.allowed && c > 0
            })
            .collect();
        if charges.is_empty() {
            return Ok(());
        }
        let split = charges[undo.index(charges.len())];
        let mut key = Key::new(algorithm, &quota);
        for &(t, c) in &trace[..split] {
            key.decide(&quota, t, c);
        }
        let (t, c) = trace[split];
        let never_came = key.state.clone();
        let (at, d) = key.decide(&quota, t, c);
        prop_assert!(d.allowed);
        let mut undone = key.state.clone();
        undone.refund(&quota, at, c);
        let mut never_came = never_came;
        for &(later, cost) in &trace[split + 1..] {
            let later = later.max(at);
            prop_assert_eq!(
                undone.decide(&quota, later, cost),
                never_came.decide(&quota, later, cost),
                "at {} cost {}", later, cost
            );
        }
    }

    /// Refunds never give more room than a fresh key has, never take room
    /// away, and a refund of everything leaves the key idle.
    #[test]
    fn refunds_are_capped_at_a_fresh_key(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(30),
        give_back in prop_oneof![0u64..=3, Just(u64::MAX), any::<u64>()],
    ) {
        let capacity = quota.capacity(algorithm);
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            key.decide(&quota, t, c);
            let at = key.effective(t);
            let before = key.state.preview(&quota, at, 0);
            let mut refunded = key.state.clone();
            refunded.refund(&quota, t, give_back);
            let after = refunded.preview(&quota, at, 0);
            prop_assert!(after.remaining >= before.remaining);
            prop_assert!(after.remaining <= capacity);
            if give_back == 0 {
                prop_assert_eq!(&refunded, &key.state, "a refund of 0 changed the state");
            }
            let mut emptied = key.state.clone();
            emptied.refund(&quota, t, u64::MAX);
            prop_assert!(emptied.is_idle(&quota, at));
            prop_assert_eq!(emptied.preview(&quota, at, 0).remaining, capacity);
        }
    }

    /// A refund stamped before the key's last change acts at that change's
    /// time, like a late request.
    #[test]
    fn late_refunds_act_at_the_last_change(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(30),
        give_back in 1u64..=5,
        early in 1u64..=1_000_000,
    ) {
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            key.decide(&quota, t, c);
            prop_assert_eq!(key.state.last_update(), key.last);
            let (mut late, mut on_time) = (key.state.clone(), key.state.clone());
            late.refund(&quota, key.last.saturating_sub(early), give_back);
            on_time.refund(&quota, key.last, give_back);
            prop_assert_eq!(late, on_time);
        }
    }
}
