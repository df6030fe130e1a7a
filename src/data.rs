//! The paper's synthetic data model (SPEC section 2).
//!
//! Each sequence has T tokens in four groups at fixed positions (R, W_{Y*}, W_{-Y*}, I):
//! x_t = c_t mu_{Y*} or c_t mu_{-Y*} plus N(0, sigma^2 I_d) noise. Training labels are
//! flipped with rate eta (the noisy set); test labels are clean. The initial parameters
//! p(0), W(0) ([`Params`]) belong to the data of a run too: one `init` stream.

use ndarray::{Array1, Array2, Array3, ArrayView2};

use crate::arith::{self, Arith, F64};
use crate::config::{Config, FlipRule, Group, LabelRule, PInit, Signals, WInit};
use crate::rng::{self, Stream};

pub(crate) mod head;
pub(crate) mod supplied;

/// Where a data set's arrays come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Drawn from the config's seeded streams ([`Dataset::generate`]).
    #[default]
    Generated,
    /// Given as arrays ([`Dataset::supplied`]): tokens, labels, the head nu and the
    /// groups are the caller's; the signals `mu` are not defined (zero).
    Supplied,
}

impl Source {
    /// True for generated data (the manifest then does not name its source).
    pub fn is_generated(&self) -> bool {
        *self == Source::Generated
    }
}

/// One split (train or test): tokens, labels and the fixed head values g_t = <nu, x_t>.
#[derive(Debug, Clone)]
pub struct Split {
    /// Tokens, shape (n, T, d).
    pub x: Array3<f64>,
    /// True labels Y*: in {+1, -1} for the binary model, class indices in [0, K) for the
    /// multi-class one ([`crate::config::ModelSpec`]).
    pub y_true: Vec<i8>,
    /// Observed labels Y (equal to `y_true` on the test split).
    pub y: Vec<i8>,
    /// Head values g_{i,t} = <nu, x_{i,t}> of the binary head nu (for K classes: of
    /// classes 0 and 1's binary head), shape (n, T).
    pub g: Array2<f64>,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// True when the split has no samples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// Tokens of sample `i`, shape (T, d).
    pub fn tokens(&self, i: usize) -> ArrayView2<'_, f64> {
        self.x.index_axis(ndarray::Axis(0), i)
    }

    /// Whether sample `i` carries a flipped label (belongs to the noisy set N).
    pub fn is_noisy(&self, i: usize) -> bool {
        self.y[i] != self.y_true[i]
    }
}

/// Initial parameters in f64 (the data of a run). `w = None` means W = I.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The token p.
    pub p: Array1<f64>,
    /// The key-query matrix W (d x d), or `None` for the identity.
    pub w: Option<Array2<f64>>,
}

impl Params {
    /// Initial parameters of `cfg` (p from `init.p`, W from `init.w`), from the `init`
    /// stream (the one stream of initial values): p first, then W row by row. A
    /// `[factorised]` config has no W (`None`).
    pub fn init(cfg: &Config) -> Params {
        let d = cfg.d;
        let mut r = rng::stream(cfg.seed, Stream::Init);
        let mut p = Array1::zeros(d);
        if cfg.init.p == PInit::Gaussian {
            rng::fill_normal(
                &mut r,
                cfg.init.p_scale,
                p.as_slice_mut().expect("contiguous"),
            );
        }
        let w = match (cfg.dense_w(), cfg.init.w) {
            // W = I in p-mode, or the factorised map (its blocks draw from their own streams)
            (false, _) => None,
            (true, WInit::Identity) => Some(Array2::eye(d)),
            (true, WInit::KaimingUniform) => {
                let bound = 1.0 / (d as f64).sqrt();
                Some(Array2::from_shape_simple_fn((d, d), || {
                    (2.0 * rng::uniform(&mut r) - 1.0) * bound
                }))
            }
        };
        Params { p, w }
    }
}

/// The signals, the head and both splits of one run.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Class signal mu_{+1}.
    pub mu_pos: Array1<f64>,
    /// Class signal mu_{-1}.
    pub mu_neg: Array1<f64>,
    /// Every class signal mu_0, ..., mu_{K-1} (the binary model: mu_{+1}, mu_{-1}; class
    /// c's signal is the c-th; empty for supplied data).
    pub class_signals: Vec<Array1<f64>>,
    /// Signal norm ||mu|| (the config's `mu_norm`).
    pub mu_norm: f64,
    /// Fixed linear head nu = (mu_{+1} - mu_{-1}) / (||mu_{+1} - mu_{-1}|| ||mu||) (for K
    /// classes: nu_0 - nu_1, the binary head of classes 0 and 1; supplied, the difference
    /// of the supplied head's first two rows, rounded to f64).
    pub nu: Array1<f64>,
    /// The multi-class head (K, d), class-major (row c is nu_c), in f64: computed from the
    /// signals ([`head::multiclass_head`]) for generated data, the caller's for supplied
    /// data; `None` for the binary model. The trainers take it from
    /// [`Dataset::multiclass_head`] (for generated data in their own arithmetic).
    pub nu_classes: Option<Array2<f64>>,
    /// Group of each token position.
    pub groups: Vec<Group>,
    /// Training split (with label noise).
    pub train: Split,
    /// Test split (clean labels).
    pub test: Split,
    /// Generated or supplied: a supplied head `nu` is taken as given
    /// ([`Dataset::head`]).
    pub source: Source,
}

impl Dataset {
    /// Draw the data set of `cfg` from its seeded streams. `cfg` must be validated.
    pub fn generate(cfg: &Config) -> Dataset {
        Dataset::generate_cached(cfg, None)
    }

    /// [`Dataset::generate`], taking the test tokens' noise from `cache` where it holds
    /// it (the same bits).
    pub fn generate_cached(cfg: &Config, cache: Option<&NoiseCache>) -> Dataset {
        let class_signals = signals(cfg);
        let (mu_pos, mu_neg) = (class_signals[0].clone(), class_signals[1].clone());
        let nu = Array1::from_vec(head::head(
            &F64,
            mu_pos.as_slice().expect("contiguous"),
            mu_neg.as_slice().expect("contiguous"),
            cfg.mu_norm,
        ));
        let groups = cfg.layout.groups();
        let nu_classes = cfg.model.is_multiclass().then(|| {
            let k = class_signals.len();
            Array2::from_shape_vec(
                (k, cfg.d),
                head::multiclass_head(&F64, &class_signals, cfg.mu_norm),
            )
            .expect("K x d head")
        });

        let (y_true, y) = train_labels(cfg);
        let train = draw_split(
            cfg,
            Stream::TrainTokens,
            y_true,
            y,
            &class_signals,
            &nu,
            None,
        );

        let mut test_labels = rng::stream(cfg.seed, Stream::TestLabels);
        let y_test: Vec<i8> = (0..cfg.n_test)
            .map(|_| draw_label(cfg, &mut test_labels))
            .collect();
        let test = draw_split(
            cfg,
            Stream::TestTokens,
            y_test.clone(),
            y_test,
            &class_signals,
            &nu,
            cache,
        );
        Dataset {
            mu_pos,
            mu_neg,
            class_signals,
            mu_norm: cfg.mu_norm,
            nu,
            nu_classes,
            groups,
            train,
            test,
            source: Source::Generated,
        }
    }

    /// The head nu in `ar`: computed from the signals in `ar` for generated data (so the
    /// twin's nu is exact to its precision), converted from the f64 array for supplied
    /// data (exact but in f32).
    pub fn head<A: Arith>(&self, ar: &A) -> Vec<A::Real> {
        match self.source {
            Source::Generated => head::head(
                ar,
                self.mu_pos.as_slice().expect("contiguous"),
                self.mu_neg.as_slice().expect("contiguous"),
                self.mu_norm,
            ),
            Source::Supplied => self
                .nu
                .iter()
                .map(|v| {
                    let mut r = ar.zero();
                    ar.set_f64(&mut r, *v);
                    r
                })
                .collect(),
        }
    }

    /// The multi-class head nu (K x d, class-major: `nu[c * d + k]`) in `ar`, of a data set
    /// made for a K-class config: computed from the signals in `ar` for generated data (so
    /// the twin's head is exact to its precision), converted from the supplied f64 array
    /// ([`Dataset::nu_classes`]) for supplied data.
    pub fn multiclass_head<A: Arith>(&self, ar: &A) -> Vec<A::Real> {
        match (self.source, &self.nu_classes) {
            (Source::Supplied, Some(nu)) => nu
                .iter()
                .map(|v| {
                    let mut r = ar.zero();
                    ar.set_f64(&mut r, *v);
                    r
                })
                .collect(),
            _ => head::multiclass_head(ar, &self.class_signals, self.mu_norm),
        }
    }

    /// Signal of class `y`.
    pub fn mu(&self, y: i8) -> &Array1<f64> {
        if y > 0 { &self.mu_pos } else { &self.mu_neg }
    }
}

/// The generated training labels of `cfg`: the true labels Y* and the observed ones
/// (Y* with the config's flips), both from the `TrainLabels` stream (the true labels
/// first, then the flips), as [`Dataset::generate`] draws them (no token is drawn).
pub(crate) fn train_labels(cfg: &Config) -> (Vec<i8>, Vec<i8>) {
    let mut labels = rng::stream(cfg.seed, Stream::TrainLabels);
    let k = cfg.model.classes;
    let multiclass = cfg.model.is_multiclass();
    let y_true: Vec<i8> = match (cfg.labels, multiclass) {
        (LabelRule::Random, _) => (0..cfg.n_train)
            .map(|_| draw_label(cfg, &mut labels))
            .collect(),
        (LabelRule::HalfSplit, false) => (0..cfg.n_train)
            .map(|i| if i < cfg.n_train.div_ceil(2) { 1 } else { -1 })
            .collect(),
        // balanced blocks: class floor(i K / n), at K = 2 the first ceil(n/2) in class 0
        (LabelRule::HalfSplit, true) => (0..cfg.n_train)
            .map(|i| ((i as u128 * k as u128) / cfg.n_train as u128) as i8)
            .collect(),
    };
    let y = flipped_labels(cfg, &mut labels, &y_true);
    (y_true, y)
}

/// `y_true` with the config's label flips drawn from the `TrainLabels` stream `labels`:
/// the positions first ([`flip_positions`]), then, for K > 2 classes, each flipped
/// label's new class in position order. A flipped label goes to the other class (binary:
/// -Y; K = 2: 1 - Y) or, for K > 2, to a uniformly random other class, (Y + 1 + U{0..K-2})
/// mod K (the official real-data kernel's (y + randint(1, K)) mod K). The one flip rule of
/// generated data ([`train_labels`]) and of supplied true labels
/// ([`Dataset::supplied`]).
pub(crate) fn flipped_labels<R: rand_core::Rng>(
    cfg: &Config,
    labels: &mut R,
    y_true: &[i8],
) -> Vec<i8> {
    let k = cfg.model.classes;
    let multiclass = cfg.model.is_multiclass();
    let flipped = flip_positions(cfg, labels, y_true);
    let mut y = y_true.to_vec();
    for &i in &flipped {
        y[i] = match (multiclass, k) {
            (false, _) => -y[i],
            (true, 2) => 1 - y[i],
            (true, _) => {
                let shift = 1 + rng::below(labels, (k - 1) as u64) as usize;
                ((y[i] as usize + shift) % k) as i8
            }
        };
    }
    y
}

/// One true label drawn from `rng`: the binary model's fair coin (+1 on a top bit of 1);
/// for K classes the class K - 1 - floor(K u) of the same 64-bit word u / 2^64, so that
/// K = 2 draws class 0 (label +1) exactly where the binary model draws +1.
fn draw_label<R: rand_core::Rng>(cfg: &Config, rng: &mut R) -> i8 {
    if !cfg.model.is_multiclass() {
        return coin(rng);
    }
    let k = cfg.model.classes as u128;
    let c = (rng.next_u64() as u128 * k) >> 64;
    (k - 1 - c) as i8
}

/// The training samples whose labels are flipped, by the config's flip rule and
/// rate, drawn from the `TrainLabels` stream `labels` after the true labels.
pub(crate) fn flip_positions<R: rand_core::Rng>(
    cfg: &Config,
    labels: &mut R,
    y_true: &[i8],
) -> Vec<usize> {
    match cfg.flips {
        FlipRule::Exact => rng::choose(labels, cfg.n_train, cfg.exact_flip_count()),
        FlipRule::Bernoulli => (0..cfg.n_train)
            .filter(|_| rng::uniform(labels) < cfg.eta)
            .collect(),
        FlipRule::PerClassFirst => {
            let classes: Vec<i8> = if cfg.model.is_multiclass() {
                (0..cfg.model.classes as i8).collect()
            } else {
                vec![1, -1]
            };
            let per_class = cfg.exact_flip_count() / classes.len();
            let mut out: Vec<usize> = classes
                .iter()
                .flat_map(|c| {
                    (0..cfg.n_train)
                        .filter(|&i| y_true[i] == *c)
                        .take(per_class)
                        .collect::<Vec<_>>()
                })
                .collect();
            out.sort_unstable();
            out
        }
    }
}

fn coin<R: rand_core::Rng>(rng: &mut R) -> i8 {
    if rng.next_u64() >> 63 == 1 { 1 } else { -1 }
}

/// The K class signals (K = 2 for the binary model: mu_{+1}, mu_{-1}): `axis`, ||mu|| e_c;
/// `random`, Gaussian vectors drawn in class order from the `Signals` stream,
/// orthonormalised by modified Gram-Schmidt in class order, scaled by ||mu|| (at K = 2
/// the binary model's operations, bit for bit).
fn signals(cfg: &Config) -> Vec<Array1<f64>> {
    let (d, k) = (cfg.d, cfg.model.classes);
    match cfg.signals {
        Signals::Axis => (0..k)
            .map(|c| {
                let mut a = Array1::zeros(d);
                a[c] = cfg.mu_norm;
                a
            })
            .collect(),
        Signals::Random => {
            let mut r = rng::stream(cfg.seed, Stream::Signals);
            let mut raw = vec![vec![0.0; d]; k];
            for v in raw.iter_mut() {
                rng::fill_normal(&mut r, 1.0, v);
            }
            for c in 0..k {
                let (done, rest) = raw.split_at_mut(c);
                let v = &mut rest[0];
                for a in done.iter() {
                    let proj = arith::dot(a, v);
                    F64.axpy(&-proj, a, v);
                }
                let nv = arith::norm(v);
                v.iter_mut().for_each(|x| *x /= nv);
            }
            raw.iter()
                .map(|v| Array1::from_iter(v.iter().map(|x| x * cfg.mu_norm)))
                .collect()
        }
    }
}

/// Unit Gaussian noise of one split's tokens, drawn row by row (one row = one token's
/// d values, each row starting a fresh Box-Muller pair) from the split's stream.
fn unit_noise(seed: u64, stream: Stream, rows: usize, d: usize, out: &mut [f64]) {
    let mut rng = rng::stream(seed, stream);
    for row in out.chunks_exact_mut(d).take(rows) {
        rng::fill_normal(&mut rng, 1.0, row);
    }
}

/// Recently drawn unit noise, shared between runs that differ only in what does not
/// change the noise (||mu||, rho, eta, step size, ...): a grid's cells over ||mu|| at one
/// d and seed draw their test set once. Bit-identical to drawing it again: fill_normal
/// computes sigma * a, and so does the scaling of a cached a.
#[derive(Debug)]
pub struct NoiseCache {
    entries: std::sync::Mutex<std::collections::VecDeque<(NoiseKey, std::sync::Arc<Vec<f64>>)>>,
    capacity: usize,
}

/// What the unit noise of a split depends on.
type NoiseKey = (u64, u64, usize, usize);

impl NoiseCache {
    /// A cache of the `capacity` most recent noise arrays.
    pub fn new(capacity: usize) -> NoiseCache {
        NoiseCache {
            entries: std::sync::Mutex::new(std::collections::VecDeque::new()),
            capacity: capacity.max(1),
        }
    }

    fn get(&self, seed: u64, stream: Stream, rows: usize, d: usize) -> std::sync::Arc<Vec<f64>> {
        let key = (seed, stream as u64, rows, d);
        let hit = {
            let entries = self.entries.lock().expect("cache lock");
            entries
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        };
        if let Some(v) = hit {
            return v;
        }
        let mut noise = vec![0.0; rows * d];
        unit_noise(seed, stream, rows, d, &mut noise);
        let noise = std::sync::Arc::new(noise);
        let mut entries = self.entries.lock().expect("cache lock");
        if !entries.iter().any(|(k, _)| *k == key) {
            if entries.len() == self.capacity {
                entries.pop_front();
            }
            entries.push_back((key, noise.clone()));
        }
        noise
    }
}

/// The class whose signal token `t` of a sample of true class `y_true` carries (SPEC
/// sections 2 and 14): R and W_{Y*} carry Y*'s; the j-th weakly relevant token of the
/// other classes carries the j mod (K - 1)-th class other than Y* (in class order; the
/// binary model's -Y*); I none. As an index into the class signals (binary: +1 is 0).
fn token_class(cfg: &Config, y_true: i8, group: Group, j: usize) -> Option<usize> {
    let own = if cfg.model.is_multiclass() {
        y_true as usize
    } else {
        usize::from(y_true < 0)
    };
    let k = cfg.model.classes;
    match group {
        Group::R | Group::WSame => Some(own),
        Group::WOpposite => {
            let m = j % (k - 1);
            Some(if m < own { m } else { m + 1 })
        }
        Group::I => None,
    }
}

/// The class whose signal the token at position `t` of a generated sample of true
/// class `y_true` carries (as an index into the class signals; the binary model's +1 is
/// 0), `None` for an irrelevant token.
pub fn class_of_token(cfg: &Config, y_true: i8, t: usize) -> Option<usize> {
    let first_weak = cfg.layout.relevant + cfg.layout.weak_same;
    token_class(
        cfg,
        y_true,
        cfg.layout.group_of(t),
        t.wrapping_sub(first_weak),
    )
}

fn draw_split(
    cfg: &Config,
    stream: Stream,
    y_true: Vec<i8>,
    y: Vec<i8>,
    signals: &[Array1<f64>],
    nu: &Array1<f64>,
    cache: Option<&NoiseCache>,
) -> Split {
    let (n, t_len, d) = (y.len(), cfg.layout.tokens, cfg.d);
    let groups = cfg.layout.groups();
    let mut x = Array3::<f64>::zeros((n, t_len, d));
    {
        let flat = x.as_slice_mut().expect("standard layout");
        match cache {
            Some(c) => flat.copy_from_slice(&c.get(cfg.seed, stream, n * t_len, d)),
            None => unit_noise(cfg.seed, stream, n * t_len, d, flat),
        }
    }
    let nu = nu.as_slice().expect("contiguous");
    let first_weak = cfg.layout.relevant + cfg.layout.weak_same;
    for (i, yt) in y_true.iter().enumerate() {
        for (t, group) in groups.iter().enumerate() {
            let mut row = x.slice_mut(ndarray::s![i, t, ..]);
            let row = row.as_slice_mut().expect("contiguous");
            row.iter_mut().for_each(|v| *v *= cfg.sigma);
            let scale = if *group == Group::R { 1.0 } else { cfg.rho };
            let signal = token_class(cfg, *yt, *group, t.wrapping_sub(first_weak))
                .map(|c| (scale, &signals[c]));
            if let Some((c, mu)) = signal {
                for (v, m) in row.iter_mut().zip(mu) {
                    *v += c * m;
                }
            }
        }
    }
    let g = Array2::from_shape_vec((n, t_len), head::head_values(&F64, x.view(), nu))
        .expect("n x T head values");
    Split { x, y_true, y, g }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        Config {
            d: 50,
            n_test: 30,
            ..Config::default()
        }
    }

    #[test]
    fn same_seed_same_bits_and_streams_are_independent() {
        let c = small();
        let a = Dataset::generate(&c);
        let b = Dataset::generate(&c);
        assert_eq!(a.train.x, b.train.x);
        let mut c2 = c.clone();
        c2.n_test = 60;
        let e = Dataset::generate(&c2);
        assert_eq!(
            a.train.x, e.train.x,
            "more test samples must not change training data"
        );
        assert_eq!(a.train.y, e.train.y);
    }

    #[test]
    fn exact_flips_and_head_norm() {
        let c = small();
        let ds = Dataset::generate(&c);
        let noisy = (0..ds.train.len())
            .filter(|&i| ds.train.is_noisy(i))
            .count();
        assert_eq!(noisy, c.exact_flip_count());
        assert!((0..ds.test.len()).all(|i| !ds.test.is_noisy(i)));
        let nn = arith::norm(ds.nu.as_slice().unwrap());
        assert!((nn - 1.0 / c.mu_norm).abs() < 1e-15);
    }

    #[test]
    fn relevant_token_carries_the_true_signal() {
        let mut c = small();
        c.sigma = 0.0;
        let ds = Dataset::generate(&c);
        for i in 0..ds.train.len() {
            let x = ds.train.tokens(i);
            let mu = ds.mu(ds.train.y_true[i]);
            assert_eq!(x.row(0), mu.view());
            let opp = ds.mu(-ds.train.y_true[i]);
            assert_eq!(x.row(2).to_owned(), opp.mapv(|v| v * c.rho));
        }
    }
}
