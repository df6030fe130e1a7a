//! Data supplied as arrays ("your own tokens"): real features run through everything that
//! does not need the generator (the trainers, the twin, compare, judge).
//!
//! The caller gives the training tokens (n, T, d) with their labels, a test set, the head
//! nu (d) and, when known, each position's token group; the config still describes the
//! run (step size, steps, mode, formulation, method, seed of the initial parameters) and
//! must agree with the arrays' sizes (`n_train`, `layout.tokens`, `d`, `n_test`).
//!
//! Label noise: without `y_true_train`, `y_train` is taken as the true labels and the
//! config's flip rule and rate flip some of them, drawn from the seed's `TrainLabels`
//! stream (so eta can be swept on real data). With `y_true_train` the labels are final:
//! at `eta = 0` the noise is the caller's (any flips); at `eta > 0` they must be what the
//! config's flips give from `y_true_train`: injected as above (a data set written after
//! tokensel injected its noise reads back as the same run) or as the generator drew them
//! (the arrays of `tokensel data` for this config read back as the config's own run);
//! anything else is refused, not silently relabelled.
//!
//! Groups: the selection metrics (attention mass and top token per group, the paper's
//! Definition 4.1 score) need each position's group. Without `groups`, the config's
//! layout names them by position; for data whose groups are not known, those metrics
//! then measure positions (the first `layout.relevant` positions against the rest), not
//! relevance, and must be read so.

use ndarray::{Array1, Array2, Array3};

use super::{Dataset, Source, Split, flip_positions, train_labels};
use crate::arith::F64;
use crate::config::{Config, Group};
use crate::error::{Error, Result};
use crate::rng::{self, Stream};

/// The arrays of a supplied data set.
#[derive(Debug, Clone)]
pub struct Supplied {
    /// Training tokens (n_train, T, d).
    pub x_train: Array3<f64>,
    /// Training labels in {+1, -1}: observed ones with `y_true_train`, true ones without
    /// (the config's flip rule then flips some).
    pub y_train: Vec<i8>,
    /// True training labels, when the noise is the caller's.
    pub y_true_train: Option<Vec<i8>>,
    /// Test tokens (n_test, T, d).
    pub x_test: Array3<f64>,
    /// Test labels (true) in {+1, -1}.
    pub y_test: Vec<i8>,
    /// The fixed head nu (d).
    pub nu: Array1<f64>,
    /// Each position's group (T), when known; else the config's layout.
    pub groups: Option<Vec<Group>>,
}

fn mismatch(what: &str, reason: String) -> Error {
    Error::Mismatch {
        what: format!("supplied `{what}`"),
        reason,
    }
}

/// Every value finite (the index of the first that is not, in `what`'s message).
fn check_finite<'a>(what: &str, values: impl IntoIterator<Item = &'a f64>) -> Result<()> {
    match values.into_iter().position(|v| !v.is_finite()) {
        Some(k) => Err(mismatch(
            what,
            format!("value at flat index {k} is not finite"),
        )),
        None => Ok(()),
    }
}

/// Labels of length `n`, each +1 or -1.
fn check_labels(what: &str, y: &[i8], n: usize) -> Result<()> {
    if y.len() != n {
        return Err(mismatch(
            what,
            format!("{} labels, the config gives {n} samples", y.len()),
        ));
    }
    match y.iter().position(|v| *v != 1 && *v != -1) {
        Some(i) => Err(mismatch(
            what,
            format!("label {} at index {i}; labels are +1 or -1", y[i]),
        )),
        None => Ok(()),
    }
}

/// Tokens of shape (n, T, d) as the config gives, every value finite.
fn check_tokens(what: &str, x: &Array3<f64>, n: usize, cfg: &Config) -> Result<()> {
    let want = (n, cfg.tokens(), cfg.d);
    if x.dim() != want {
        return Err(mismatch(
            what,
            format!(
                "shape {:?}, the config gives (n, T, d) = {want:?}",
                x.shape()
            ),
        ));
    }
    check_finite(what, x.iter())
}

/// `y_true` with the config's label flips (from the seed's `TrainLabels` stream).
fn inject(cfg: &Config, y_true: &[i8]) -> Vec<i8> {
    let mut labels = rng::stream(cfg.seed, Stream::TrainLabels);
    let mut y = y_true.to_vec();
    for i in flip_positions(cfg, &mut labels, y_true) {
        y[i] = -y[i];
    }
    y
}

/// Whether `y` is `y_true` with the config's label flips, either of the two ways
/// tokensel flips labels: injected into supplied true labels ([`inject`], the flips
/// drawn from the start of the `TrainLabels` stream: a supplied data set written back
/// with both labels), or generated ([`Dataset::generate`]: the config's own true labels
/// drawn first, then the flips from the same stream: the arrays of `tokensel data`
/// passed back). Any other labels are not the config's flips.
fn config_flips(cfg: &Config, y_true: &[i8], y: &[i8]) -> bool {
    if inject(cfg, y_true) == y {
        return true;
    }
    let (gen_true, gen_y) = train_labels(cfg);
    gen_true == y_true && gen_y == y
}

/// `x` in standard (row-major, C) layout: itself when it is, else a copy.
fn standard(x: Array3<f64>) -> Array3<f64> {
    if x.is_standard_layout() {
        x
    } else {
        x.as_standard_layout().into_owned()
    }
}

/// A split with its head values.
fn split(x: Array3<f64>, y_true: Vec<i8>, y: Vec<i8>, nu: &[f64]) -> Split {
    let (n, t, _) = x.dim();
    let g = Array2::from_shape_vec((n, t), super::head::head_values(&F64, x.view(), nu))
        .expect("n x T head values");
    Split { x, y_true, y, g }
}

impl Dataset {
    /// A data set from supplied arrays, checked against `cfg` (validated): shapes, finite
    /// values, labels in {+1, -1}, a head of length d, groups of length T, and supplied
    /// noise either the caller's (`eta = 0`) or the config's flips. Label noise is
    /// injected by the config's rule when no true labels are given.
    pub fn supplied(cfg: &Config, s: Supplied) -> Result<Dataset> {
        if cfg.model.is_multiclass() {
            return Err(Error::config(
                "model.kind",
                "supplied data is read for the binary model only (labels +-1 and one head \
                 nu); K-class supplied data is not implemented yet",
            ));
        }
        check_tokens("X_train", &s.x_train, cfg.n_train, cfg)?;
        check_tokens("X_test", &s.x_test, cfg.n_test, cfg)?;
        check_labels("y_train", &s.y_train, cfg.n_train)?;
        check_labels("y_test", &s.y_test, cfg.n_test)?;
        if s.nu.len() != cfg.d {
            return Err(mismatch(
                "nu",
                format!("length {}, the config gives d = {}", s.nu.len(), cfg.d),
            ));
        }
        check_finite("nu", s.nu.iter())?;
        if s.nu.iter().all(|v| *v == 0.0) {
            return Err(mismatch("nu", "is zero: every output would be 0".into()));
        }
        let groups = match s.groups {
            Some(g) if g.len() != cfg.tokens() => {
                return Err(mismatch(
                    "groups",
                    format!(
                        "{} positions, the config gives T = {}",
                        g.len(),
                        cfg.tokens()
                    ),
                ));
            }
            Some(g) => g,
            None => cfg.layout.groups(),
        };
        let (y_true, y) = match s.y_true_train {
            Some(y_true) => {
                check_labels("y_true_train", &y_true, cfg.n_train)?;
                if cfg.eta != 0.0 && !config_flips(cfg, &y_true, &s.y_train) {
                    return Err(Error::config(
                        "eta",
                        format!(
                            "{}: y_train is not y_true_train with the config's flips; for \
                             noise of the data's own set eta = 0",
                            cfg.eta
                        ),
                    ));
                }
                (y_true, s.y_train)
            }
            None => {
                let y = inject(cfg, &s.y_train);
                (s.y_train, y)
            }
        };
        // any memory order the caller's arrays have (a Fortran-ordered or reversed
        // array): the head values and the trainers read rows of standard layout
        let nu = s.nu.to_vec();
        let train = split(standard(s.x_train), y_true, y, &nu);
        let y_test = s.y_test;
        let test = split(standard(s.x_test), y_test.clone(), y_test, &nu);
        Ok(Dataset {
            mu_pos: Array1::zeros(cfg.d),
            mu_neg: Array1::zeros(cfg.d),
            class_signals: Vec::new(),
            mu_norm: f64::NAN,
            nu: Array1::from(nu),
            groups,
            train,
            test,
            source: Source::Supplied,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Params;
    use crate::train::Trainer;

    fn small() -> Config {
        Config {
            d: 12,
            n_test: 9,
            steps: 40,
            ..Config::default()
        }
    }

    /// The arrays of a generated data set, with training labels `y_train` and optionally
    /// true labels; groups as generated or from the layout.
    fn fed_back(ds: &Dataset, y_train: &[i8], y_true: Option<&[i8]>, groups: bool) -> Supplied {
        Supplied {
            x_train: ds.train.x.clone(),
            y_train: y_train.to_vec(),
            y_true_train: y_true.map(<[i8]>::to_vec),
            x_test: ds.test.x.clone(),
            y_test: ds.test.y_true.clone(),
            nu: ds.nu.clone(),
            groups: groups.then(|| ds.groups.clone()),
        }
    }

    /// The generated data fed back as arrays (with its noise supplied) trains to the same
    /// trajectory bits in f64: the supplied head is the generated nu's f64 value, and
    /// the f64 trainer computes nu in f64 too.
    #[test]
    fn generated_data_fed_back_gives_the_same_trajectory() {
        let cfg = small();
        let gen_data = Dataset::generate(&cfg);
        let back = fed_back(
            &gen_data,
            &gen_data.train.y,
            Some(&gen_data.train.y_true),
            true,
        );
        let cfg0 = Config {
            eta: 0.0,
            ..cfg.clone()
        };
        let sup = Dataset::supplied(&cfg0, back).unwrap();
        assert_eq!(Params::init(&cfg), Params::init(&cfg0));
        let a = Trainer::run(&cfg, &gen_data, F64, &mut |_| {}).unwrap();
        let b = Trainer::run(&cfg0, &sup, F64, &mut |_| {}).unwrap();
        assert_eq!(a.digest(), b.digest());
    }

    /// The generated data fed back with both labels under its own config (eta > 0: the
    /// generator's flips, drawn after the true labels) is accepted and trains to the
    /// same trajectory bits in f64; labels with one flip moved are still refused.
    #[test]
    fn generated_data_fed_back_at_its_eta_gives_the_same_trajectory() {
        let cfg = small();
        assert!(cfg.eta > 0.0);
        let gen_data = Dataset::generate(&cfg);
        let back = fed_back(
            &gen_data,
            &gen_data.train.y,
            Some(&gen_data.train.y_true),
            false,
        );
        let sup = Dataset::supplied(&cfg, back.clone()).unwrap();
        assert_eq!(sup.train.y, gen_data.train.y);
        let a = Trainer::run(&cfg, &gen_data, F64, &mut |_| {}).unwrap();
        let b = Trainer::run(&cfg, &sup, F64, &mut |_| {}).unwrap();
        assert_eq!(a.digest(), b.digest());
        let mut moved = back;
        let flipped = (0..cfg.n_train)
            .find(|&i| gen_data.train.is_noisy(i))
            .unwrap();
        let clean = (0..cfg.n_train)
            .find(|&i| !gen_data.train.is_noisy(i))
            .unwrap();
        moved.y_train[flipped] = -moved.y_train[flipped];
        moved.y_train[clean] = -moved.y_train[clean];
        let e = Dataset::supplied(&cfg, moved).unwrap_err().to_string();
        assert!(
            e.contains("not y_true_train with the config's flips"),
            "{e}"
        );
    }

    #[test]
    fn injected_noise_follows_the_flip_rule() {
        let cfg = Config {
            n_train: 40,
            ..small()
        };
        let ds = Dataset::generate(&cfg);
        let sup = Dataset::supplied(&cfg, fed_back(&ds, &ds.train.y_true, None, false)).unwrap();
        let noisy = (0..40).filter(|&i| sup.train.is_noisy(i)).count();
        assert_eq!(noisy, cfg.exact_flip_count());
        assert_eq!(sup.train.y_true, ds.train.y_true);
        // written out with both labels, it reads back at the same eta as the same labels
        let back = Dataset::supplied(
            &cfg,
            fed_back(&ds, &sup.train.y, Some(&sup.train.y_true), false),
        )
        .unwrap();
        assert_eq!(back.train.y, sup.train.y);
    }

    #[test]
    fn refuses_what_cannot_work() {
        let cfg = small();
        let ds = Dataset::generate(&cfg);
        let good = fed_back(&ds, &ds.train.y_true, None, false);
        let mut cases: Vec<(Supplied, &str)> = Vec::new();
        let mut s = good.clone();
        s.x_train[[1, 2, 3]] = f64::NAN;
        cases.push((s, "X_train"));
        let mut s = good.clone();
        s.nu = Array1::zeros(5);
        cases.push((s, "nu"));
        let mut s = good.clone();
        s.y_train[0] = 0;
        cases.push((s, "y_train"));
        let mut s = good.clone();
        s.x_test = Array3::zeros((9, 8, 11));
        cases.push((s, "X_test"));
        let mut s = good.clone();
        s.groups = Some(vec![Group::R; 3]);
        cases.push((s, "groups"));
        let mut s = good.clone();
        s.y_true_train = Some(s.y_train.clone());
        cases.push((s, "eta"));
        for (s, what) in cases {
            let e = Dataset::supplied(&cfg, s).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
            assert!(e.contains("supplied") || what == "eta", "{e}");
        }
    }
}
