//! Data supplied as arrays ("your own tokens"): real features run through everything that
//! does not need the generator (the trainers, the twin, compare, judge).
//!
//! The caller gives the training tokens (n, T, d) with their labels, a test set, the head
//! nu and, when known, each position's token group; the config still describes the run
//! (model, step size, steps, mode, formulation, method, seed of the initial parameters)
//! and must agree with the arrays' sizes (`n_train`, `layout.tokens`, `d`, `n_test`, and
//! for the K-class model `model.classes`).
//!
//! Labels and head by model: the binary model takes labels +1/-1 and a head nu of length
//! d; the K-class model (`[model] kind = "multiclass"`) takes labels that are class
//! indices 0..K-1 and a head of shape (K, d), class-major (row c is nu_c).
//!
//! Label noise: without `y_true_train`, `y_train` is taken as the true labels and the
//! config's flip rule and rate flip some of them, drawn from the seed's `TrainLabels`
//! stream (so eta can be swept on real data); a flipped K-class label goes to a uniformly
//! random other class, drawn after the positions (the generator's rule,
//! `data::flipped_labels`). With `y_true_train` the labels are final: at `eta = 0` the
//! noise is the caller's (any flips); at `eta > 0` they must be what the config's flips
//! give from `y_true_train`: injected as above (a data set written after tokensel injected
//! its noise reads back as the same run) or as the generator drew them (the arrays of
//! `tokensel data` for this config read back as the config's own run); anything else is
//! refused, not silently relabelled.
//!
//! Groups: the selection metrics (attention mass and top token per group, the paper's
//! Definition 4.1 score) need each position's group. Without `groups`, the config's
//! layout names them by position; for data whose groups are not known, those metrics
//! then measure positions (the first `layout.relevant` positions against the rest), not
//! relevance, and must be read so.

use ndarray::{Array1, Array2, Array3, ArrayD, Ix1, Ix2};

use super::{Dataset, Source, Split, flipped_labels, train_labels};
use crate::arith::F64;
use crate::config::{Config, Group};
use crate::error::{Error, Result};
use crate::rng::{self, Stream};

/// The arrays of a supplied data set.
#[derive(Debug, Clone)]
pub struct Supplied {
    /// Training tokens (n_train, T, d).
    pub x_train: Array3<f64>,
    /// Training labels (+1/-1 for the binary model, class indices 0..K-1 for the K-class
    /// one): observed ones with `y_true_train`, true ones without (the config's flip rule
    /// then flips some).
    pub y_train: Vec<i8>,
    /// True training labels, when the noise is the caller's.
    pub y_true_train: Option<Vec<i8>>,
    /// Test tokens (n_test, T, d).
    pub x_test: Array3<f64>,
    /// Test labels (true), as `y_train`'s.
    pub y_test: Vec<i8>,
    /// The fixed head: shape (d) for the binary model, (K, d) class-major for the K-class
    /// model.
    pub nu: ArrayD<f64>,
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

/// One label `v` as `cfg`'s model stores it: +1 or -1 for the binary model, a class index
/// in 0..K for the K-class model; `Err` holds the rule it breaks (for a message naming
/// the array and the index). Any integer is taken, so that a caller's wider integers
/// (Python's int64) are checked before they are narrowed.
pub fn label_of(cfg: &Config, v: i128) -> std::result::Result<i8, String> {
    let k = cfg.model.classes as i128;
    if cfg.model.is_multiclass() {
        if (0..k).contains(&v) {
            return Ok(v as i8);
        }
        let hint = if v == -1 {
            " (+1/-1 are the binary model's labels)"
        } else {
            ""
        };
        Err(format!(
            "the K-class model's labels are class indices 0 to {} (model.classes = {k}){hint}",
            k - 1
        ))
    } else {
        match v {
            1 | -1 => Ok(v as i8),
            _ => Err(
                "labels are +1 or -1 (class indices 0..K-1 are the labels of the K-class model, \
                 model.kind = \"multiclass\")"
                    .into(),
            ),
        }
    }
}

/// Labels of length `n`, each one of `cfg`'s model ([`label_of`]); the message names the
/// array, the first bad entry and its index.
fn check_labels(cfg: &Config, what: &str, y: &[i8], n: usize) -> Result<()> {
    if y.len() != n {
        return Err(mismatch(
            what,
            format!("{} labels, the config gives {n} samples", y.len()),
        ));
    }
    for (i, &v) in y.iter().enumerate() {
        if let Err(rule) = label_of(cfg, v.into()) {
            return Err(mismatch(what, format!("label {v} at index {i}; {rule}")));
        }
    }
    Ok(())
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

/// The head of `cfg`'s model: binary, nu (d), not zero; K classes, nu (K, d) in standard
/// layout, whose rows are not all equal. Every value finite.
fn check_head(cfg: &Config, nu: ArrayD<f64>) -> Result<(Array1<f64>, Option<Array2<f64>>)> {
    let (d, k) = (cfg.d, cfg.model.classes);
    let multiclass = cfg.model.is_multiclass();
    let want: Vec<usize> = if multiclass { vec![k, d] } else { vec![d] };
    if nu.shape() != want.as_slice() {
        let given = if multiclass {
            format!("(K, d) = ({k}, {d}): one row nu_c per class, class-major")
        } else {
            format!("(d) = ({d})")
        };
        return Err(mismatch(
            "nu",
            format!("shape {:?}, the config gives {given}", nu.shape()),
        ));
    }
    check_finite("nu", nu.iter())?;
    if nu.iter().all(|v| *v == 0.0) {
        return Err(mismatch("nu", "is zero: every output would be 0".into()));
    }
    if !multiclass {
        return Ok((
            nu.into_dimensionality::<Ix1>().expect("shape checked"),
            None,
        ));
    }
    let nu = nu
        .into_dimensionality::<Ix2>()
        .expect("shape checked")
        .as_standard_layout()
        .into_owned();
    if nu.rows().into_iter().all(|r| r == nu.row(0)) {
        return Err(mismatch(
            "nu",
            format!(
                "has {k} equal rows: every class would get the same output (f_c differs by \
                 nothing), the loss would stay log K and no gradient would move p"
            ),
        ));
    }
    // the binary head of classes 0 and 1 (what `Split::g` holds for K classes)
    let binary = &nu.row(0) - &nu.row(1);
    Ok((binary, Some(nu)))
}

/// `y_true` with the config's label flips (from the seed's `TrainLabels` stream).
fn inject(cfg: &Config, y_true: &[i8]) -> Vec<i8> {
    let mut labels = rng::stream(cfg.seed, Stream::TrainLabels);
    flipped_labels(cfg, &mut labels, y_true)
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
    /// values, labels of the config's model (+1/-1, or class indices 0..K-1), a head of
    /// its shape ((d), or (K, d)) that is not degenerate, groups of length T, and supplied
    /// noise either the caller's (`eta = 0`) or the config's flips. Label noise is
    /// injected by the config's rule when no true labels are given.
    pub fn supplied(cfg: &Config, s: Supplied) -> Result<Dataset> {
        check_tokens("X_train", &s.x_train, cfg.n_train, cfg)?;
        check_tokens("X_test", &s.x_test, cfg.n_test, cfg)?;
        check_labels(cfg, "y_train", &s.y_train, cfg.n_train)?;
        check_labels(cfg, "y_test", &s.y_test, cfg.n_test)?;
        let (nu, nu_classes) = check_head(cfg, s.nu)?;
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
                check_labels(cfg, "y_true_train", &y_true, cfg.n_train)?;
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
        let nu = nu.to_vec();
        let train = split(standard(s.x_train), y_true, y, &nu);
        let y_test = s.y_test;
        let test = split(standard(s.x_test), y_test.clone(), y_test, &nu);
        Ok(Dataset {
            mu_pos: Array1::zeros(cfg.d),
            mu_neg: Array1::zeros(cfg.d),
            class_signals: Vec::new(),
            mu_norm: f64::NAN,
            nu: Array1::from(nu),
            nu_classes,
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
            nu: match &ds.nu_classes {
                Some(h) => h.clone().into_dyn(),
                None => ds.nu.clone().into_dyn(),
            },
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
        s.nu = Array1::zeros(5).into_dyn();
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

    /// A K-class config (K = 3: two weakly relevant tokens, one per other class).
    fn small_k(k: usize) -> Config {
        use crate::config::{Layout, ModelKind, ModelSpec};
        Config {
            d: 12,
            n_train: 30,
            n_test: 9,
            steps: 40,
            eta: 0.3,
            layout: Layout {
                tokens: 8,
                relevant: 1,
                weak_same: 1,
                weak_opposite: k - 1,
                irrelevant: 6 - (k - 1),
            },
            model: ModelSpec {
                kind: ModelKind::Multiclass,
                classes: k,
                ..ModelSpec::default()
            },
            ..Config::default()
        }
    }

    /// K-class generated data fed back as arrays (labels as class indices, the head (K,
    /// d)) trains to the generated run's trajectory bits in f64, with the noise the
    /// data's (eta = 0) and at the config's own eta (the generator's flips); the supplied
    /// head is what the model uses: the same data with the head doubled trains to other
    /// bits.
    #[test]
    fn k_class_data_fed_back_gives_the_same_trajectory() {
        let cfg = small_k(3);
        cfg.validate().unwrap();
        let gen_data = Dataset::generate(&cfg);
        assert_eq!(gen_data.nu_classes.as_ref().unwrap().dim(), (3, 12));
        let a = Trainer::run(&cfg, &gen_data, F64, &mut |_| {}).unwrap();
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
        let sup0 = Dataset::supplied(&cfg0, back.clone()).unwrap();
        assert_eq!(sup0.nu_classes, gen_data.nu_classes);
        let b = Trainer::run(&cfg0, &sup0, F64, &mut |_| {}).unwrap();
        assert_eq!(a.digest(), b.digest());
        let sup = Dataset::supplied(&cfg, back.clone()).unwrap();
        let c = Trainer::run(&cfg, &sup, F64, &mut |_| {}).unwrap();
        assert_eq!(a.digest(), c.digest());
        let mut doubled = back;
        doubled.nu.mapv_inplace(|v| 2.0 * v);
        let sup2 = Dataset::supplied(&cfg0, doubled).unwrap();
        let e = Trainer::run(&cfg0, &sup2, F64, &mut |_| {}).unwrap();
        assert_ne!(a.digest(), e.digest());
        let (f_a, f_e) = (
            a.checkpoints[1].samples[0].outputs.clone().unwrap(),
            e.checkpoints[1].samples[0].outputs.clone().unwrap(),
        );
        assert_eq!(a.checkpoints[1].step, e.checkpoints[1].step);
        assert!(f_a.iter().zip(&f_e).any(|(x, y)| x != y), "{f_a:?} {f_e:?}");
    }

    /// Noise injected into supplied K-class true labels follows the generator's rule, the
    /// same function: with `labels = "half_split"` the generator draws no true label, so
    /// its flips come from the start of the stream, as the injected ones do, and the
    /// observed labels agree label for label (every flipped label in another class, the
    /// exact count flipped, more than one target class used).
    #[test]
    fn injected_k_class_noise_is_the_generator_s() {
        for flips in [
            crate::config::FlipRule::Exact,
            crate::config::FlipRule::Bernoulli,
        ] {
            let cfg = Config {
                labels: crate::config::LabelRule::HalfSplit,
                flips,
                n_train: 40,
                eta: 0.4,
                ..small_k(4)
            };
            cfg.validate().unwrap();
            let ds = Dataset::generate(&cfg);
            let sup =
                Dataset::supplied(&cfg, fed_back(&ds, &ds.train.y_true, None, false)).unwrap();
            assert_eq!(sup.train.y, ds.train.y);
            assert_eq!(sup.train.y_true, ds.train.y_true);
            let noisy: Vec<usize> = (0..40).filter(|&i| sup.train.is_noisy(i)).collect();
            if flips == crate::config::FlipRule::Exact {
                assert_eq!(noisy.len(), cfg.exact_flip_count());
            }
            assert!(noisy.iter().all(|&i| (0..4).contains(&sup.train.y[i])));
            let shifts: std::collections::BTreeSet<i8> = noisy
                .iter()
                .map(|&i| (sup.train.y[i] - sup.train.y_true[i]).rem_euclid(4))
                .collect();
            assert!(shifts.len() > 1 && !shifts.contains(&0), "{shifts:?}");
        }
    }

    #[test]
    fn refuses_k_class_data_that_cannot_work() {
        let cfg = small_k(3);
        let ds = Dataset::generate(&cfg);
        let good = fed_back(&ds, &ds.train.y_true, None, false);
        let mut cases: Vec<(Supplied, &str)> = Vec::new();
        let mut s = good.clone();
        s.y_train[4] = 3;
        cases.push((s, "supplied `y_train`: label 3 at index 4; the K-class model's labels are class indices 0 to 2 (model.classes = 3)"));
        let mut s = good.clone();
        s.y_test[2] = -1;
        cases.push((s, "supplied `y_test`: label -1 at index 2; the K-class model's labels are class indices 0 to 2 (model.classes = 3) (+1/-1 are the binary model's labels)"));
        let mut s = good.clone();
        s.nu = ds.nu.clone().into_dyn();
        cases.push((
            s,
            "supplied `nu`: shape [12], the config gives (K, d) = (3, 12)",
        ));
        let mut s = good.clone();
        s.nu = ndarray::Array2::from_shape_fn((3, 12), |(_, k)| k as f64).into_dyn();
        cases.push((s, "supplied `nu`: has 3 equal rows"));
        let mut s = good.clone();
        s.nu[[2, 5]] = f64::INFINITY;
        cases.push((s, "supplied `nu`: value at flat index 29 is not finite"));
        let mut s = good.clone();
        s.nu.fill(0.0);
        cases.push((s, "supplied `nu`: is zero"));
        for (s, what) in cases {
            let e = Dataset::supplied(&cfg, s).unwrap_err().to_string();
            assert!(e.contains(what), "{e}\n{what}");
        }
        // the binary model's labels name the K-class model's
        let bin = small();
        let gen_bin = Dataset::generate(&bin);
        let mut s = fed_back(&gen_bin, &gen_bin.train.y_true, None, false);
        s.y_train[1] = 0;
        let e = Dataset::supplied(&bin, s).unwrap_err().to_string();
        assert!(e.contains("label 0 at index 1; labels are +1 or -1 (class indices 0..K-1 are the labels of the K-class model"), "{e}");
    }
}
