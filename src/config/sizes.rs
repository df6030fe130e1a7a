//! The data and size checks of a [`Config`]: the sequence length, the flip count, the
//! data set's memory, whether W is dense, and the size limits refused before any work.

use crate::error::{Error, Result};

use super::{Config, MAX_DATA_BYTES, Mode, WInit};

impl Config {
    /// Sequence length T.
    pub fn tokens(&self) -> usize {
        self.layout.tokens
    }

    /// Number of training labels flipped under [`FlipRule::Exact`](super::FlipRule::Exact): ceil(eta n).
    ///
    /// eta n is rounded to the nearest integer first when it is within 1e-9 of it, so
    /// that the decimal intent of eta (0.1 * 30 = 3, not 4) wins over binary rounding.
    pub fn exact_flip_count(&self) -> usize {
        let x = self.eta * self.n_train as f64;
        let r = x.round();
        if (x - r).abs() <= 1e-9 * x.max(1.0) {
            r as usize
        } else {
            x.ceil() as usize
        }
    }

    /// Bytes the data set (train and test tokens) and a dense W would take (saturating
    /// at `u64::MAX`; [`Config::data_gib`] gives the size past it).
    pub fn data_bytes(&self) -> u64 {
        let tokens = (self.n_train as u128 + self.n_test as u128)
            .saturating_mul(self.layout.tokens as u128)
            .saturating_mul(self.d as u128);
        let w = match self.dense_w() {
            true => (self.d as u128).saturating_mul(self.d as u128),
            false => 0,
        };
        tokens
            .saturating_add(w)
            .saturating_mul(8)
            .min(u64::MAX as u128) as u64
    }

    /// [`Config::data_bytes`] in GiB, computed in f64 so that it does not saturate (for
    /// messages).
    pub fn data_gib(&self) -> f64 {
        let tokens =
            (self.n_train as f64 + self.n_test as f64) * self.layout.tokens as f64 * self.d as f64;
        let w = match (self.mode, self.init.w) {
            (Mode::P, WInit::Identity) => 0.0,
            _ => self.d as f64 * self.d as f64,
        };
        (tokens + w) * 8.0 / (1u64 << 30) as f64
    }

    /// The size limits, checked after every key's domain (bad input, exit 2, is found
    /// first), in one fixed order whatever the other keys hold: the protocol's pool in
    /// memory, the data set in memory, then the protocol's seeds and phase-1 work
    /// (`Protocol::check_limits`). Each is a refusal ([`Error::TooLarge`], exit 3) naming
    /// the largest of the sizes that make it (`n_test` where n_test is the largest), so
    /// one over-limit input gets one answer.
    pub(super) fn check_limits(&self) -> Result<()> {
        let sizes = [
            ("d", self.d),
            ("layout.tokens", self.layout.tokens),
            ("n_train", self.n_train),
            ("n_test", self.n_test),
        ];
        if let Some(p) = &self.protocol {
            // the pool: the clean block, the noisy block and the test set, all held at once
            let pool = (p.n_clean as u128 + self.n_train as u128 + self.n_test as u128)
                .saturating_mul(self.layout.tokens as u128)
                .saturating_mul(self.d as u128)
                .saturating_mul(8);
            if pool > MAX_DATA_BYTES as u128 {
                let mut with_pool = sizes.to_vec();
                with_pool.push(("protocol.n_clean", p.n_clean));
                return Err(Error::TooLarge {
                    field: largest(&with_pool).into(),
                    reason: format!(
                        "the pool (n_clean + n_train + n_test) * tokens * d = ({} + {} + {}) \
                         * {} * {} values needs {:.3e} bytes, more than the limit of {} GiB",
                        p.n_clean,
                        self.n_train,
                        self.n_test,
                        self.layout.tokens,
                        self.d,
                        pool as f64,
                        MAX_DATA_BYTES >> 30
                    ),
                });
            }
        }
        let bytes = self.data_bytes();
        if bytes > MAX_DATA_BYTES {
            return Err(Error::TooLarge {
                field: largest(&sizes).into(),
                reason: format!(
                    "the data set (n_train + n_test) * tokens * d{}{} needs {} GiB, more than the limit of {} GiB",
                    self.data_sizes_text(),
                    if self.dense_w() {
                        " plus d * d for W"
                    } else {
                        ""
                    },
                    match self.data_gib() {
                        g if g < 1e6 => format!("{g:.2}"),
                        g => format!("{g:.3e}"),
                    },
                    MAX_DATA_BYTES >> 30
                ),
            });
        }
        if let Some(p) = &self.protocol {
            let classes = self.model.classes;
            p.check_limits(classes, self.d)?;
        }
        Ok(())
    }

    /// The sizes (n_train + n_test) * tokens * d, as in the message of the data limit.
    fn data_sizes_text(&self) -> String {
        format!(
            " = ({} + {}) * {} * {}",
            self.n_train, self.n_test, self.layout.tokens, self.d
        )
    }

    /// Whether the run stores W as a dense d x d matrix: anything but W = I in p-mode,
    /// and never with a `[factorised]` map (which has no W).
    pub fn dense_w(&self) -> bool {
        !(self.mode == Mode::P && self.init.w == WInit::Identity) && self.factorised.is_none()
    }
}

/// The key of the largest size in `sizes` (the first of equal ones): the one a size
/// limit names.
fn largest(sizes: &[(&'static str, usize)]) -> &'static str {
    sizes
        .iter()
        .fold(sizes[0], |best, s| if s.1 > best.1 { *s } else { best })
        .0
}
