//! Explicit constructions from the paper's theorems.

use ndarray::Array1;

use crate::config::Group;
use crate::data::{Dataset, Params};

/// Theorem 4.1's benign-overfitting solution (SPEC section 2b):
/// p = mu_{+1} + mu_{-1} + beta sum_i eps_{u_i}, W = I, where u_i is the first relevant
/// token of clean sample i and the first W_{-Y*} token of noisy sample i, and eps_{u_i}
/// is that token's noise, x_{u_i} - c mu (c = 1 for R, rho for W tokens), recovered from
/// the stored f64 tokens (exact up to one rounding per coordinate).
///
/// Returns `None` when the layout has no relevant or no W_{-Y*} token where one is needed.
pub fn theorem_4_1_solution(data: &Dataset, rho: f64, beta: f64) -> Option<Params> {
    let train = &data.train;
    let d = data.mu_pos.len();
    let first = |g: Group| data.groups.iter().position(|x| *x == g);
    let mut p: Array1<f64> = &data.mu_pos + &data.mu_neg;
    for i in 0..train.len() {
        let (u, mu, c) = if train.is_noisy(i) {
            (first(Group::WOpposite)?, data.mu(-train.y_true[i]), rho)
        } else {
            (first(Group::R)?, data.mu(train.y_true[i]), 1.0)
        };
        let x = train.tokens(i);
        for k in 0..d {
            p[k] += beta * (x[[u, k]] - c * mu[k]);
        }
    }
    Some(Params { p, w: None })
}
