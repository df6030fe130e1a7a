//! Minibatches (`[optimizer] batch`): which training samples step k takes.
//!
//! ```text
//! epoch e = 0, 1, ...:  perm_e = Fisher-Yates shuffle of 0..n, started from the identity,
//!                       for i = n-1 down to 1: j = below(i + 1) (unbiased, rejection
//!                       sampling: rng::below); swap(i, j)
//!                       perm_e cut into consecutive batches of b, the last one n mod b
//!                       (PyTorch's DataLoader, drop_last = False)
//! step k:               the (k - e K)-th batch of epoch e, K = ceil(n / b) batches
//!                       per epoch, e = floor(k / K)
//! ```
//!
//! Every epoch's permutation is drawn, in epoch order, from one ChaCha20 stream of the
//! config's seed ([`Stream::BatchOrder`]), so the order depends on the seed, n and b
//! only: not on the arithmetic, the thread count, or where a run was resumed (the
//! permutations are drawn again from the start, O(n) per epoch). A step's batch is
//! returned SORTED: its sums (loss, gradient) run in sample order, so `batch = n` takes
//! exactly the full-batch step's bits. (PyTorch's sampler draws `torch.randperm` from its
//! own generator: the same law, other permutations.)

use rand_chacha::ChaCha20Rng;

use crate::rng::{Stream, below, stream};

/// The batch order of a run: the current epoch's permutation and the stream it came
/// from.
#[derive(Debug, Clone)]
pub struct Order {
    seed: u64,
    n: usize,
    batch: usize,
    rng: ChaCha20Rng,
    /// The epoch whose permutation `perm` holds (`None` before the first).
    epoch: Option<u64>,
    perm: Vec<usize>,
}

impl Order {
    /// The order of `n` samples in batches of `batch` (1 <= batch <= n) under `seed`.
    pub fn new(seed: u64, n: usize, batch: usize) -> Order {
        assert!(batch >= 1 && batch <= n, "batch {batch} of n = {n}");
        Order {
            seed,
            n,
            batch,
            rng: stream(seed, Stream::BatchOrder),
            epoch: None,
            perm: Vec::new(),
        }
    }

    /// Batches per epoch, ceil(n / b).
    pub fn per_epoch(&self) -> u64 {
        self.n.div_ceil(self.batch) as u64
    }

    /// The sample indices of step `step`'s batch, in increasing order. Steps may be
    /// asked for in any order; an earlier epoch than the current one restarts the
    /// stream.
    pub fn at(&mut self, step: u64) -> Vec<usize> {
        let k = self.per_epoch();
        let (epoch, j) = (step / k, (step % k) as usize);
        if self.epoch.is_some_and(|e| e > epoch) {
            self.rng = stream(self.seed, Stream::BatchOrder);
            self.epoch = None;
        }
        while self.epoch != Some(epoch) {
            self.perm = permutation(&mut self.rng, self.n);
            self.epoch = Some(self.epoch.map_or(0, |e| e + 1));
        }
        let end = ((j + 1) * self.batch).min(self.n);
        let mut b = self.perm[j * self.batch..end].to_vec();
        b.sort_unstable();
        b
    }
}

/// A uniformly random permutation of 0..n (Fisher-Yates from the identity, module docs).
pub fn permutation(rng: &mut ChaCha20Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every epoch's batches partition 0..n (the last one smaller), epochs differ, and
    /// asking for an earlier step again gives the same batch.
    #[test]
    fn batches_partition_each_epoch() {
        let mut o = Order::new(5, 10, 4);
        assert_eq!(o.per_epoch(), 3);
        let mut epochs = Vec::new();
        for e in 0..3u64 {
            let mut all = Vec::new();
            for j in 0..3 {
                let b = o.at(e * 3 + j);
                assert_eq!(b.len(), if j == 2 { 2 } else { 4 });
                assert!(b.windows(2).all(|w| w[0] < w[1]));
                all.extend(b);
            }
            let mut sorted = all.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>());
            epochs.push(all);
        }
        assert!(epochs[0] != epochs[1] || epochs[1] != epochs[2]);
        let again = o.at(1);
        let mut fresh = Order::new(5, 10, 4);
        assert_eq!(again, fresh.at(1));
        assert_eq!(Order::new(5, 10, 10).at(3), (0..10).collect::<Vec<_>>());
    }
}

/// A minibatch run's working state beside the trainer's full-set buffers: the order,
/// the steps whose forward pass covers the whole training set (the record's
/// checkpoints), and the current step's batch pass (its samples' scores, attention,
/// token coefficients with 1/|B|, results and mean loss).
#[derive(Debug, Clone)]
pub struct Pass<R> {
    /// The batch order.
    pub order: Order,
    /// Steps whose forward pass also covers every training sample (sorted).
    pub full_steps: Vec<u64>,
    /// The current step's batch, sorted.
    pub idx: Vec<usize>,
    /// Scores of the batch's tokens (|B| x T).
    pub scores: Vec<R>,
    /// Token coefficients c = (1/|B|) dl/dz of the batch's tokens (|B| x T).
    pub c: Vec<R>,
    /// The batch's samples (coefficients with 1/|B|).
    pub samples: Vec<crate::model::Sample<R>>,
    /// The batch's mean loss.
    pub loss: R,
}
