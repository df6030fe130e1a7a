//! Seeded random streams and platform-independent sampling.
//!
//! One ChaCha20 stream per purpose, all derived from the config's `seed`
//! (`ChaCha20Rng::seed_from_u64(seed)` with the stream id set), so that drawing more
//! test samples never changes the training data. Gaussians come from Box-Muller with
//! CORE-MATH's correctly rounded `log`, `sinpi` and `cospi`: the same bits on every
//! platform (IEEE `sqrt` and products are correctly rounded too).

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};

/// The purpose of a random stream; the discriminant is the ChaCha stream id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Random class signals (only with `signals = "random"`).
    Signals = 1,
    /// Noise of the training tokens.
    TrainTokens = 2,
    /// True training labels Y* and the label flips.
    TrainLabels = 3,
    /// Noise of the test tokens.
    TestTokens = 4,
    /// True test labels.
    TestLabels = 5,
    /// Random initial parameters.
    Init = 6,
    /// The minibatch order: one permutation of the training samples per epoch, drawn
    /// in epoch order (`train::batch`).
    BatchOrder = 7,
    /// The fine-tuning protocol's split of the pool into the clean and the noisy block.
    ProtocolSplit = 8,
    /// The protocol's initial head (phase 1).
    HeadInit = 9,
    /// The protocol's sample order per epoch of phase 1.
    HeadOrder = 10,
}

/// The ChaCha20 stream for `purpose` under `seed`.
pub fn stream(seed: u64, purpose: Stream) -> ChaCha20Rng {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    rng.set_stream(purpose as u64);
    rng
}

/// 2^-53.
const EPS53: f64 = 1.0 / (1u64 << 53) as f64;

/// Uniform on [0, 1) with 53 random bits (exact: k 2^-53).
pub fn uniform<R: Rng>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * EPS53
}

/// Uniform on (0, 1] with 53 random bits ((k + 1) 2^-53).
pub fn uniform_open0<R: Rng>(rng: &mut R) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 * EPS53
}

/// A pair of independent standard normals by Box-Muller.
pub fn normal_pair<R: Rng>(rng: &mut R) -> (f64, f64) {
    let u1 = uniform_open0(rng);
    let u2 = uniform(rng);
    let r = (-2.0 * core_math::log(u1)).sqrt();
    let t = 2.0 * u2; // exact
    (r * core_math::cospi(t), r * core_math::sinpi(t))
}

/// Fill `out` with independent N(0, sigma^2) draws, pairs in order.
pub fn fill_normal<R: Rng>(rng: &mut R, sigma: f64, out: &mut [f64]) {
    let mut chunks = out.chunks_exact_mut(2);
    for pair in &mut chunks {
        let (a, b) = normal_pair(rng);
        pair[0] = sigma * a;
        pair[1] = sigma * b;
    }
    if let [last] = chunks.into_remainder() {
        *last = sigma * normal_pair(rng).0;
    }
}

/// A uniformly random subset of `k` distinct indices of `0..n`, in increasing order
/// (partial Fisher-Yates with unbiased bounded integers).
pub fn choose<R: Rng>(rng: &mut R, n: usize, k: usize) -> Vec<usize> {
    let mut chosen = ordered_sample(rng, n, k);
    chosen.sort_unstable();
    chosen
}

/// The first `k` entries of a uniformly random permutation of `0..n`, in the order drawn
/// (partial Fisher-Yates with unbiased bounded integers; `k = n`: a whole permutation).
pub fn ordered_sample<R: Rng>(rng: &mut R, n: usize, k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..k.min(n) {
        let j = i + below(rng, (n - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(k.min(n));
    idx
}

/// Unbiased integer in `0..bound` (rejection sampling; `bound > 0`).
pub fn below<R: Rng>(rng: &mut R, bound: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX - bound + 1) % bound;
    loop {
        let v = rng.next_u64();
        if v <= zone {
            return v % bound;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4)
            .map(|_| stream(7, Stream::TrainTokens).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            stream(7, Stream::TrainTokens).next_u64(),
            stream(7, Stream::TestTokens).next_u64()
        );
    }

    #[test]
    fn normal_moments() {
        let mut rng = stream(1, Stream::TrainTokens);
        let mut v = vec![0.0; 200_001];
        fill_normal(&mut rng, 2.0, &mut v);
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        // standard errors: mean 2/sqrt(n) ~ 0.0045, variance 4 sqrt(2/n) ~ 0.0126
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 4.0).abs() < 0.08, "var {var}");
    }

    #[test]
    fn choose_is_a_subset() {
        let mut rng = stream(3, Stream::TrainLabels);
        let c = choose(&mut rng, 20, 4);
        assert_eq!(c.len(), 4);
        assert!(c.windows(2).all(|w| w[0] < w[1]) && c[3] < 20);
        let mut seen = [0usize; 5];
        for _ in 0..5000 {
            seen[below(&mut rng, 5) as usize] += 1;
        }
        assert!(seen.iter().all(|&s| (900..1100).contains(&s)), "{seen:?}");
    }
}
