//! The one vocabulary of the quantities that runs record and analyses compare: one name
//! each, used by compare, judge, the external-trajectory format, the saturation sweep
//! and every report.
//!
//! For a run at step t (the forward pass at the parameters after t updates), with
//! q = W^T p:
//!
//! | name | shape | what |
//! | --- | --- | --- |
//! | `p` | (d) | the trainable token p |
//! | `q` | (d) | q = W^T p |
//! | `W` | (d, d) | the key-query matrix (scores = X W^T p) |
//! | `scores` | (n, T) | scores z_t = <x_t, q> of the training tokens |
//! | `attention` | (n, T) | softmax of the scores |
//! | `rest` | (n) | 1 - s_top of each training sample |
//! | `output` | (n), or (n, K) | the model's outputs of each training sample: the binary f, or a K-class model's f_0, ..., f_{K-1} |
//! | `grad_q` | (d) | the gradient with respect to q: dL/dq (df/dq for one sequence in the saturation sweep) |
//! | `loss` | () | the empirical risk (logistic; the cross-entropy for K classes) |

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::model::{AnyModel, Model};

/// A quantity of the model, by its one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Quantity {
    /// The trainable token p (d).
    #[serde(rename = "p")]
    P,
    /// q = W^T p (d).
    #[serde(rename = "q")]
    Q,
    /// The key-query matrix W (d, d).
    #[serde(rename = "W")]
    W,
    /// Scores of the training tokens (n, T).
    #[serde(rename = "scores")]
    Scores,
    /// Attention: the softmax of each sample's scores (n, T).
    #[serde(rename = "attention")]
    Attention,
    /// 1 - s_top of each training sample (n).
    #[serde(rename = "rest")]
    Rest,
    /// The outputs of each training sample: the binary f (n), a K-class model's K
    /// outputs f_c (n, K).
    #[serde(rename = "output")]
    Output,
    /// The gradient with respect to q (d).
    #[serde(rename = "grad_q")]
    GradQ,
    /// The empirical risk (a scalar).
    #[serde(rename = "loss")]
    Loss,
}

impl Quantity {
    /// Every quantity, in report order.
    pub const ALL: [Quantity; 9] = [
        Quantity::P,
        Quantity::Q,
        Quantity::W,
        Quantity::Scores,
        Quantity::Attention,
        Quantity::Rest,
        Quantity::Output,
        Quantity::GradQ,
        Quantity::Loss,
    ];

    /// Its one name (keys in files and reports).
    pub fn name(self) -> &'static str {
        match self {
            Quantity::P => "p",
            Quantity::Q => "q",
            Quantity::W => "W",
            Quantity::Scores => "scores",
            Quantity::Attention => "attention",
            Quantity::Rest => "rest",
            Quantity::Output => "output",
            Quantity::GradQ => "grad_q",
            Quantity::Loss => "loss",
        }
    }

    /// The quantity with this name.
    pub fn from_name(name: &str) -> Option<Quantity> {
        Quantity::ALL.into_iter().find(|q| q.name() == name)
    }

    /// Every name, comma separated (for messages).
    pub fn names() -> String {
        Quantity::ALL.map(Quantity::name).join(", ")
    }

    /// Shape of one step's value in a run of `cfg`; the outputs per sample are the
    /// model's ([`Model::outputs`]: (n) for the binary model, (n, K) for K classes).
    pub fn shape(self, cfg: &Config) -> Vec<usize> {
        let (n, t, d) = (cfg.n_train, cfg.tokens(), cfg.d);
        match self {
            Quantity::P | Quantity::Q | Quantity::GradQ => vec![d],
            Quantity::W => vec![d, d],
            Quantity::Scores | Quantity::Attention => vec![n, t],
            Quantity::Rest => vec![n],
            Quantity::Output => match AnyModel::of(cfg).outputs() {
                1 => vec![n],
                k => vec![n, k],
            },
            Quantity::Loss => vec![],
        }
    }

    /// True for the d-space quantities (p, q, W, grad_q), which a span trainer rebuilds
    /// from its coefficients.
    pub fn in_d_space(self) -> bool {
        matches!(
            self,
            Quantity::P | Quantity::Q | Quantity::W | Quantity::GradQ
        )
    }
}

impl std::fmt::Display for Quantity {
    /// The name, padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, round-trip, and are what serde writes.
    #[test]
    fn one_name_each() {
        for q in Quantity::ALL {
            assert_eq!(Quantity::from_name(q.name()), Some(q));
            assert_eq!(serde_json::to_value(q).unwrap(), q.name());
            assert_eq!(format!("{q:<10}|"), format!("{:<10}|", q.name()));
        }
        assert_eq!(Quantity::from_name("z"), None);
    }
}
