//! The logistic loss l(u) = log(1 + exp(-u)) of a margin u = y f, and its derivative, in
//! two formulations: `Naive`, as the official encoder code writes it
//! (`torch.log(1 + torch.exp(-y * f))`, differentiated by autograd), which overflows for
//! u below about -709 in f64; `Stable`, without overflow (the token-selection model's
//! loss, [`crate::model::token_selection::loss`]).

use crate::arith::Arith;
use crate::config::Formulation;

/// Which formulation of the loss ([`Formulation`]'s two).
pub type Loss = Formulation;

/// `l(u)`: `Naive` as log(fl(1 + exp(-u))) (the sum rounded, then its logarithm:
/// log(s) = log1p(s - 1), where s - 1 is exact for s >= 1), `Stable` as the
/// token-selection model's loss.
pub fn loss<A: Arith>(ar: &A, form: Loss, u: &A::Real) -> A::Real {
    let mut out = ar.zero();
    match form {
        Formulation::Stable => crate::model::token_selection::loss(ar, u, &mut out),
        Formulation::Naive => {
            ar.set(&mut out, u);
            ar.neg(&mut out);
            ar.exp(&mut out);
            ar.add_f64(&mut out, 1.0);
            ar.add_f64(&mut out, -1.0);
            ar.ln_1p(&mut out);
        }
    }
    out
}

/// `l'(u)`: `Naive` as autograd takes it through log(1 + exp(-u)): -(1 / (1 + e)) e with
/// e = exp(-u); `Stable` as the token-selection model's derivative (-logistic(-u)).
pub fn loss_derivative<A: Arith>(ar: &A, form: Loss, u: &A::Real) -> A::Real {
    let mut out = ar.zero();
    match form {
        Formulation::Stable => crate::model::token_selection::loss_derivative(ar, u, &mut out),
        Formulation::Naive => {
            let mut e = u.clone();
            ar.neg(&mut e);
            ar.exp(&mut e);
            let mut s = e.clone();
            ar.add_f64(&mut s, 1.0);
            ar.set_f64(&mut out, 1.0);
            ar.div(&mut out, &s);
            ar.mul(&mut out, &e);
            ar.neg(&mut out);
        }
    }
    out
}
