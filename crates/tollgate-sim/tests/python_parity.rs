//! Bit-exact parity with CPython's `random` module, against values Python
//! printed once (the command that made each file is its first line), so the
//! tests need no Python.

use tollgate_sim::rng::PyRandom;

/// The `repr()` floats of a fixture, parsed exactly (Rust and Python both
/// round-trip shortest representations).
fn fixture(text: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.parse().expect("a float"))
        .collect()
}

fn assert_bits(expected: &[f64], mut draw: impl FnMut() -> f64) {
    assert!(expected.len() >= 500, "fixture too short");
    for (i, want) in expected.iter().enumerate() {
        let got = draw();
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "draw {i}: {got:?} vs {want:?}"
        );
    }
}

#[test]
fn random_matches_python_for_seed_42() {
    let expected = fixture(include_str!("fixtures/python_random_42.txt"));
    let mut r = PyRandom::new(42);
    assert_bits(&expected, || r.random());
}

#[test]
fn expovariate_matches_python_for_seed_42() {
    let expected = fixture(include_str!("fixtures/python_expovariate_42_6.txt"));
    let mut r = PyRandom::new(42);
    assert_bits(&expected, || r.expovariate(6.0));
}

#[test]
fn a_seed_wider_than_32_bits_matches_python() {
    let expected = fixture(include_str!("fixtures/python_random_2p40p7.txt"));
    let mut r = PyRandom::new((1 << 40) + 7);
    assert_bits(&expected, || r.random());
}
