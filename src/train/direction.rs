//! A run's direction at its checkpoints against the proved attention SVM solution of
//! the config's pattern (`[direction]`; [`crate::model::token_selection::limit`]):
//! 1 - corr(tau), ||theta||, the normalised margin, the support's deviation and the
//! share of samples on the pattern, computed in the run's arithmetic.

use crate::arith::Arith;
use crate::model::Selection;
use crate::model::token_selection::limit::{Limit, LimitSummary, Space, off_pattern};

/// The tracked limit in a run's arithmetic.
#[derive(Debug, Clone)]
pub struct Tracker<R> {
    /// theta at step 0.
    theta0: Vec<R>,
    /// theta_mm / ||theta_mm||.
    unit: Vec<R>,
    /// The pattern alpha.
    pattern: Vec<usize>,
    /// The support constraints (sample, token).
    support: Vec<(usize, usize)>,
    /// The tracked space.
    pub space: Space,
    /// What the trajectory records of the limit.
    pub summary: LimitSummary,
}

/// A direction record in the run's arithmetic (`io::trajectory::DirectionPoint`
/// before rounding).
#[derive(Debug, Clone)]
pub struct DirectionValues<R> {
    /// 1 - corr (`None` at theta = theta0).
    pub one_minus_corr: Option<R>,
    /// ||theta||.
    pub norm: R,
    /// The normalised margin (`None` at theta = 0).
    pub margin: Option<R>,
    /// The support's deviation (`None` unless min m > 0 is proved).
    pub support_deviation: Option<R>,
    /// Training samples whose top token is proved to be alpha_i.
    pub on_pattern: usize,
}

/// sqrt(sum x_j^2) in `ar` (the fixed-order dot product).
fn norm<A: Arith>(ar: &A, x: &[A::Real]) -> A::Real {
    let mut s = ar.zero();
    ar.dot(x, x, &mut s);
    ar.sqrt(&mut s);
    s
}

impl<R: Clone> Tracker<R> {
    /// Track `limit` from `theta0` (the trained parameter at step 0, in `limit`'s space).
    pub fn new<A: Arith<Real = R>>(ar: &A, limit: &Limit, theta0: Vec<R>) -> Self {
        let mut unit = limit.direction.entries(ar);
        let n = norm(ar, &unit);
        unit.iter_mut().for_each(|v| ar.div(v, &n));
        Tracker {
            theta0,
            unit,
            pattern: limit.summary.pattern.clone(),
            support: limit.support.clone(),
            space: limit.summary.space,
            summary: limit.summary.clone(),
        }
    }

    /// The direction record in `ar` (enclosures in ball arithmetic: the minimum and the
    /// maximum over constraints are formed by [`Arith::max`], which encloses a maximum
    /// over undecided orders).
    pub fn values<A: Arith<Real = R>>(
        &self,
        ar: &A,
        theta: &[R],
        scores: &[R],
        tops: &[(usize, Selection)],
    ) -> DirectionValues<R> {
        let t = scores.len() / self.pattern.len().max(1);
        // u = theta - theta0, 1 - corr = ||u / ||u|| - unit||^2 / 2
        let mut u: Vec<R> = theta.to_vec();
        for (a, b) in u.iter_mut().zip(&self.theta0) {
            ar.sub(a, b);
        }
        let nu = norm(ar, &u);
        let one_minus_corr = (ar.sign(&nu) != 0).then(|| {
            for (a, b) in u.iter_mut().zip(&self.unit) {
                ar.div(a, &nu);
                ar.sub(a, b);
            }
            let mut s = ar.zero();
            ar.dot(&u, &u, &mut s);
            ar.div_f64(&mut s, 2.0);
            s
        });
        let theta_norm = norm(ar, theta);
        // constraint values m_c = z_{i,alpha_i} - z_{i,t}, and -min_c m_c as the max of
        // their negatives
        let values: Vec<Vec<R>> = self
            .pattern
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                (0..t)
                    .map(|k| {
                        let mut m = ar.zero();
                        ar.diff(&mut m, &scores[i * t + a], &scores[i * t + k]);
                        m
                    })
                    .collect()
            })
            .collect();
        let mut neg_min: Option<R> = None;
        for (i, row) in values.iter().enumerate() {
            for (k, m) in row.iter().enumerate() {
                if k == self.pattern[i] {
                    continue;
                }
                let mut neg = m.clone();
                ar.neg(&mut neg);
                match &mut neg_min {
                    None => neg_min = Some(neg),
                    Some(v) => ar.max(v, &neg),
                }
            }
        }
        let mut min = neg_min.unwrap_or_else(|| ar.zero());
        ar.neg(&mut min);
        let margin = (ar.sign(&theta_norm) != 0).then(|| {
            let mut m = min.clone();
            ar.div(&mut m, &theta_norm);
            m
        });
        let support_deviation = (ar.decide_sign(&min) == Some(1)).then(|| {
            let mut worst = ar.zero();
            for &(i, k) in &self.support {
                let mut r = values[i][k].clone();
                ar.div(&mut r, &min);
                ar.add_f64(&mut r, -1.0);
                ar.max(&mut worst, &r);
            }
            worst
        });
        let on_pattern = self.pattern.len() - off_pattern(tops, &self.pattern).len();
        DirectionValues {
            one_minus_corr,
            norm: theta_norm,
            margin,
            support_deviation,
            on_pattern,
        }
    }
}
