//! Python's `random.Random`, bit for bit: MT19937 seeded the way CPython
//! seeds it from an integer, its 53-bit `random()` and the `expovariate` and
//! `uniform` built on it. A published Python experiment can then be rerun
//! here with the same draws, not just the same distribution.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// A Mersenne Twister that draws what CPython's `random.Random(seed)` draws.
#[derive(Clone)]
pub struct PyRandom {
    state: [u32; N],
    index: usize,
}

impl PyRandom {
    /// The generator of `random.Random(seed)` for a non-negative integer
    /// seed: CPython feeds the seed's 32-bit words, least significant first,
    /// to `init_by_array` (one zero word for seed 0).
    pub fn new(seed: u64) -> Self {
        let (low, high) = (seed as u32, (seed >> 32) as u32);
        if high == 0 {
            Self::from_key(&[low])
        } else {
            Self::from_key(&[low, high])
        }
    }

    /// MT19937's reference `init_by_array`.
    fn from_key(key: &[u32]) -> Self {
        let mut mt = Self::from_u32(19_650_218);
        let state = &mut mt.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = state[i - 1] ^ (state[i - 1] >> 30);
            state[i] = (state[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                state[0] = state[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = state[i - 1] ^ (state[i - 1] >> 30);
            state[i] = (state[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                state[0] = state[N - 1];
                i = 1;
            }
        }
        state[0] = 0x8000_0000;
        mt
    }

    /// MT19937's reference `init_genrand`.
    fn from_u32(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1] ^ (state[i - 1] >> 30);
            state[i] = 1_812_433_253u32.wrapping_mul(prev).wrapping_add(i as u32);
        }
        PyRandom { state, index: N }
    }

    fn refill(&mut self) {
        let s = &mut self.state;
        for k in 0..N {
            let y = (s[k] & UPPER_MASK) | (s[(k + 1) % N] & LOWER_MASK);
            let mag = if y & 1 == 0 { 0 } else { MATRIX_A };
            s[k] = s[(k + M) % N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// The next 32-bit output (`genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.refill();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: a float in `[0, 1)` from 27 + 26 random bits.
    pub fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `expovariate(rate)`: an exponential gap with mean `1 / rate`,
    /// computed as CPython does, `-log(1 - random()) / rate`.
    pub fn expovariate(&mut self, rate: f64) -> f64 {
        -(1.0 - self.random()).ln() / rate
    }

    /// `uniform(a, b)`: `a + (b - a) * random()`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference implementation's published check: `init_genrand(5489)`
    /// makes 3499211612 its first output.
    #[test]
    fn reference_first_output() {
        assert_eq!(PyRandom::from_u32(5489).next_u32(), 3_499_211_612);
    }

    #[test]
    fn random_stays_in_the_unit_interval() {
        let mut r = PyRandom::new(7);
        for _ in 0..10_000 {
            let x = r.random();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
