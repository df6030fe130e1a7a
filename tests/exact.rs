//! Exact rational tier: rounding-error bounds of the f64 and MPFR computations, and a
//! rigorous enclosure of the softmax. Derivations: proofs-notes/error-bounds.md.

use num_rational::BigRational;
use num_traits::{Signed, Zero};
use tokensel::prelude::analysis::exact;
use tokensel::prelude::analysis::exact::{rat, rat_mpfr};
use tokensel::prelude::{Arith, Config, Dataset, F64, Formulation, Mpfr, PInit, Params, kernels};

fn setup() -> (Config, Dataset, Vec<f64>) {
    let mut c = Config {
        d: 300,
        n_train: 4,
        n_test: 1,
        ..Config::default()
    };
    c.init.p = PInit::Gaussian;
    c.init.p_scale = 0.1;
    let data = Dataset::generate(&c);
    let q = Params::init(&c).p.to_vec();
    (c, data, q)
}

/// The direction u = x_r (relevant token) and the score gap of q = u: scaling q by
/// gap / unit_gap gives a sequence whose attention has that gap.
fn direction(x: ndarray::ArrayView2<f64>) -> (Vec<f64>, f64) {
    let u = x.row(0).to_vec();
    let mut z = vec![0.0; x.nrows()];
    kernels::scores(&F64, x, &u, &mut z);
    z.sort_by(f64::total_cmp);
    (u, z[z.len() - 1] - z[z.len() - 2])
}

/// Scores: |fl(x.q) - x.q| <= gamma_{ceil(d/L)+log2 L} sum |x_k q_k| in f64 (u = 2^-53)
/// and in the twin at 64 bits (u = 2^-64); the exact value is the judge.
#[test]
fn scores_lie_within_the_dot_product_bound() {
    let (_, data, q) = setup();
    let ar = Mpfr::truth(64).unwrap();
    let qf = ar.of_slice(&q);
    let mut zt = ar.zero();
    let (u53, u64) = (exact::unit_roundoff(53), exact::unit_roundoff(64));
    let mut worst = 0.0f64;
    for i in 0..data.train.len() {
        let x = data.train.tokens(i);
        for row in x.rows() {
            let row = row.as_slice().unwrap();
            let truth = exact::dot(row, &q);
            let err64 = (rat(tokensel::prelude::kernels::dot(row, &q)) - &truth).abs();
            let bound64 = exact::dot_bound(row, &q, &u53);
            assert!(err64 <= bound64, "f64 score error above gamma bound");
            ar.dot_f64(row, &qf, &mut zt);
            let err_twin = (rat_mpfr(&zt) - &truth).abs();
            assert!(
                err_twin <= exact::dot_bound(row, &q, &u64),
                "64-bit twin above its bound"
            );
            let ratio = num_traits::ToPrimitive::to_f64(&(err64 / bound64)).unwrap();
            worst = worst.max(ratio);
        }
    }
    assert!(worst > 0.0, "f64 scores carry some rounding error");
}

/// Gradient assembly with the softmax vector given exactly: the naive f64 assembly
/// lies within gamma_{T+2}(sum|s g x| + |f| sum|s x|), as does the twin's at 80 bits.
/// At gap ~40 that bound exceeds the gradient itself (the cancellation of SPEC 6),
/// at gap ~5 it is 1e-13 of it.
#[test]
fn naive_gradient_assembly_within_bound_and_bound_explains_cancellation() {
    let (_, data, _) = setup();
    let x = data.train.tokens(0);
    let g64: Vec<f64> = data.train.g.row(0).to_vec();
    let g: Vec<BigRational> = g64.iter().map(|v| rat(*v)).collect();
    let (u, unit_gap) = direction(x);
    let mut z = vec![0.0; x.nrows()];
    let ar = Mpfr::truth(80).unwrap();
    let mut ratio_at = Vec::new();
    for gap in [5.0, 40.0] {
        let q: Vec<f64> = u.iter().map(|v| gap / unit_gap * v).collect();
        kernels::scores(&F64, x, &q, &mut z);
        let mut s = vec![0.0; z.len()];
        let mut att = kernels::Softmax::new(&F64);
        kernels::softmax(&F64, &z, &mut s, Formulation::Naive, &mut att);
        let mut f = 0.0;
        kernels::output(&F64, &s, &g64, att.top, Formulation::Naive, &mut f);
        let (mut scratch, mut out) = (vec![0.0; x.ncols()], vec![0.0; x.ncols()]);
        kernels::grad_q_naive(&F64, x, &s, &g64, &f, &1.0, &mut scratch, &mut out);
        let sr: Vec<BigRational> = s.iter().map(|v| rat(*v)).collect();
        let fr = rat(f);
        let exact_grad = exact::grad_naive(x, &sr, &g, &fr);
        let bound = exact::grad_naive_bound(x, &sr, &g, &fr, &exact::unit_roundoff(53));
        for k in 0..x.ncols() {
            assert!(
                (rat(out[k]) - &exact_grad[k]).abs() <= bound[k],
                "f64 coordinate {k} at gap {gap}"
            );
        }
        // the twin's naive assembly on the same (exact) inputs, 80 bits
        let (sf, gf) = (ar.of_slice(&s), ar.of_slice(&g64));
        let (mut ts, mut tout) = (ar.zeros(x.ncols()), ar.zeros(x.ncols()));
        let (ff, one) = (ar.of(f), ar.of(1.0));
        kernels::grad_q_naive(&ar, x, &sf, &gf, &ff, &one, &mut ts, &mut tout);
        let bound80 = exact::grad_naive_bound(x, &sr, &g, &fr, &exact::unit_roundoff(80));
        for k in 0..x.ncols() {
            assert!(
                (rat_mpfr(&tout[k]) - &exact_grad[k]).abs() <= bound80[k],
                "twin coordinate {k}"
            );
        }
        let norm = |v: &[BigRational]| v.iter().fold(BigRational::zero(), |a, b| a + b.abs());
        let r = num_traits::ToPrimitive::to_f64(
            &(norm(&bound) / norm(&exact::grad_definition(x, &sr, &g))),
        )
        .unwrap();
        ratio_at.push(r);
    }
    assert!(
        ratio_at[0] < 1e-12,
        "bound / gradient at gap 5: {}",
        ratio_at[0]
    );
    assert!(
        ratio_at[1] > 1.0,
        "bound / gradient at gap 40: {}",
        ratio_at[1]
    );
}

/// The twin's softmax (256 bits) and the f64 softmax (CORE-MATH exp) lie inside the
/// rigorous rational enclosure of softmax(z), widened only by their own roundings:
/// (|z_t - z_top| + T + 4) u (f64 where s_t is a normal number).
#[test]
fn softmax_values_lie_in_the_rational_enclosure() {
    let (_, data, _) = setup();
    let x = data.train.tokens(1);
    let (u, unit_gap) = direction(x);
    let mut z = vec![0.0; x.nrows()];
    let ar = Mpfr::truth(256).unwrap();
    let t_len = z.len() as i64;
    for gap in [0.5, 3.0, 20.0, 37.0, 300.0, 700.0] {
        let q: Vec<f64> = u.iter().map(|v| gap / unit_gap * v).collect();
        kernels::scores(&F64, x, &q, &mut z);
        let zr: Vec<BigRational> = z.iter().map(|v| rat(*v)).collect();
        let enc = exact::softmax_enclosure(&zr, 300);
        let zmax = zr.iter().max().unwrap().clone();
        // f64
        let mut s = vec![0.0; z.len()];
        kernels::softmax(
            &F64,
            &z,
            &mut s,
            Formulation::Stable,
            &mut kernels::Softmax::new(&F64),
        );
        // twin on the same f64 scores
        let zf = ar.of_slice(&z);
        let mut sf = ar.zeros(z.len());
        let mut att = kernels::Softmax::new(&ar);
        kernels::softmax(&ar, &zf, &mut sf, Formulation::Stable, &mut att);
        for t in 0..z.len() {
            let (lo, hi) = &enc[t];
            let delta = (&zr[t] - &zmax).abs() + BigRational::from_integer((t_len + 4).into());
            if s[t] < f64::MIN_POSITIVE {
                // f64 has no relative accuracy below the normal range: the true value
                // must be down there too
                assert!(
                    *lo < exact::pow2(-1021),
                    "f64 s[{t}] = {} but s >= 2^-1021",
                    s[t]
                );
            }
            let mut checks = vec![(rat_mpfr(&sf[t]), 256i64)];
            if s[t] >= f64::MIN_POSITIVE {
                checks.push((rat(s[t]), 53));
            }
            for (value, bits) in checks {
                let slack = &delta * exact::pow2(-bits) * BigRational::new(101.into(), 100.into());
                let one = BigRational::from_integer(1.into());
                assert!(
                    lo * (&one - &slack) <= value && value <= hi * (&one + &slack),
                    "s[{t}] ({bits} bits) outside the enclosure at gap {gap}"
                );
            }
        }
    }
}
