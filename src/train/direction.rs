//! A run's direction at its checkpoints against the proved attention SVM solution of
//! the config's pattern (`[direction]`; [`crate::model::token_selection::limit`]):
//! 1 - corr(tau), ||theta||, the normalised margin, the support's deviation and the
//! share of samples on the pattern, computed in the run's arithmetic.

use crate::arith::Arith;
use crate::io::trajectory::DirectionPoint;
use crate::model::Selection;
use crate::model::token_selection::limit::{Limit, LimitSummary, Space};

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

    /// The direction record of `theta` with training scores `scores` (n T, row-major)
    /// and top tokens `tops` (one per training sample).
    pub fn point<A: Arith<Real = R>>(
        &self,
        ar: &A,
        theta: &[R],
        scores: &[R],
        tops: &[(usize, Selection)],
    ) -> DirectionPoint {
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
            ar.to_f64(&s)
        });
        let theta_norm = norm(ar, theta);
        // constraint values m_c = z_{i,alpha_i} - z_{i,t}
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
        let mut min: Option<R> = None;
        for (i, row) in values.iter().enumerate() {
            for (k, m) in row.iter().enumerate() {
                if k == self.pattern[i] {
                    continue;
                }
                match &mut min {
                    None => min = Some(m.clone()),
                    Some(v) => {
                        if ar.cmp(m, v) == Some(std::cmp::Ordering::Less) {
                            ar.set(v, m);
                        }
                    }
                }
            }
        }
        let min = min.unwrap_or_else(|| ar.zero());
        let margin = (ar.sign(&theta_norm) != 0).then(|| {
            let mut m = min.clone();
            ar.div(&mut m, &theta_norm);
            ar.to_f64(&m)
        });
        let support_deviation = (ar.sign(&min) > 0).then(|| {
            let mut worst = ar.zero();
            for &(i, k) in &self.support {
                let mut r = values[i][k].clone();
                ar.div(&mut r, &min);
                ar.add_f64(&mut r, -1.0);
                ar.max(&mut worst, &r);
            }
            ar.to_f64(&worst)
        });
        let on = tops
            .iter()
            .zip(&self.pattern)
            .filter(|((top, sel), a)| *sel == Selection::Decided && top == *a)
            .count();
        DirectionPoint {
            one_minus_corr,
            norm: ar.to_f64(&theta_norm),
            margin,
            support_deviation,
            on_pattern: on as f64 / self.pattern.len().max(1) as f64,
        }
    }
}
