//! The one typed choice of an arithmetic: parsed from a name and an optional precision
//! (the Python binding's `arithmetic=`/`prec=`, the command line's `--arith`, `--prec`
//! and `--predictor`), checked once, and turned into the concrete [`Arith`] for code
//! written generically over it ([`ArithVisitor`]).

use super::{Arith, Ball, DEFAULT_BALL_PREC, DEFAULT_PREC, F32, F64, Kind, Mpfr};
use crate::error::{Error, Result};

/// An arithmetic to compute in, with its precision where it has a free one.
///
/// Made by [`Choice::parse`] (or [`Choice::mpfr`], [`Choice::ball`]), which refuse a
/// precision outside the arithmetic's range with the constructors' messages; [`Choice::with`]
/// builds the arithmetic and hands it to an [`ArithVisitor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Hardware binary64 ([`F64`]).
    F64,
    /// Hardware binary32 ([`F32`]).
    F32,
    /// MPFR at 53 bits with binary64's range: the bit-exact f64 predictor
    /// ([`Mpfr::predictor`]).
    Predictor,
    /// MPFR at this many bits: the truth twin ([`Mpfr::truth`]).
    Mpfr(u32),
    /// Ball arithmetic at this many bits ([`Ball::new`]).
    Ball(u32),
}

/// Code written once over any [`Arith`], run by [`Choice::with`] in the arithmetic chosen.
pub trait ArithVisitor {
    /// What the visit gives.
    type Output;
    /// Compute in `ar`.
    fn visit<A: Arith>(self, ar: A) -> Result<Self::Output>;
}

impl Choice {
    /// The names [`Choice::parse`] takes, in the order its message lists them.
    pub const NAMES: &'static str = "f64, f32, mpfr, predictor, ball";

    /// The arithmetic named `name` (`f64`, `f32`, `predictor`, `mpfr`, `ball`) at `prec`
    /// bits (only for `mpfr`, default [`DEFAULT_PREC`], and `ball`, default
    /// [`DEFAULT_BALL_PREC`]). An unknown name is an argument error of `arithmetic`; a
    /// precision given to an arithmetic of fixed precision, or out of range, one of
    /// `prec` ([`Error::InvalidArgument`]).
    pub fn parse(name: &str, prec: Option<u32>) -> Result<Choice> {
        let fixed = |c| match prec {
            Some(_) => Err(Error::argument(
                "prec",
                format!("`{name}` has a fixed precision (prec is for mpfr and ball)"),
            )),
            None => Ok(c),
        };
        match name {
            "f64" => fixed(Choice::F64),
            "f32" => fixed(Choice::F32),
            "predictor" => fixed(Choice::Predictor),
            "mpfr" => Choice::mpfr(prec.unwrap_or(DEFAULT_PREC)),
            "ball" => Choice::ball(prec.unwrap_or(DEFAULT_BALL_PREC)),
            _ => Err(Error::argument(
                "arithmetic",
                format!("`{name}` is not one of {}", Choice::NAMES),
            )),
        }
    }

    /// The MPFR truth twin at `prec` bits ([`Mpfr::truth`]'s range and message).
    pub fn mpfr(prec: u32) -> Result<Choice> {
        Mpfr::truth(prec).map(|_| Choice::Mpfr(prec))
    }

    /// The ball arithmetic at `prec` bits ([`Ball::new`]'s range and message).
    pub fn ball(prec: u32) -> Result<Choice> {
        Ball::new(prec).map(|_| Choice::Ball(prec))
    }

    /// Which arithmetic this is (what a trainer in it records).
    pub fn kind(self) -> Kind {
        match self {
            Choice::F64 => Kind::F64,
            Choice::F32 => Kind::F32,
            Choice::Predictor => Kind::Predictor,
            Choice::Mpfr(_) => Kind::Mpfr,
            Choice::Ball(_) => Kind::Ball,
        }
    }

    /// Precision in bits (53 for f64 and the predictor, 24 for f32), as the arithmetic's
    /// [`Arith::prec`].
    pub fn prec(self) -> u32 {
        match self {
            Choice::F64 | Choice::Predictor => 53,
            Choice::F32 => 24,
            Choice::Mpfr(p) | Choice::Ball(p) => p,
        }
    }

    /// Build the arithmetic and run `v` in it (a precision out of range: the
    /// constructor's config error, before `v` runs).
    pub fn with<V: ArithVisitor>(self, v: V) -> Result<V::Output> {
        match self {
            Choice::F64 => v.visit(F64),
            Choice::F32 => v.visit(F32),
            Choice::Predictor => v.visit(Mpfr::predictor()),
            Choice::Mpfr(p) => v.visit(Mpfr::truth(p)?),
            Choice::Ball(p) => v.visit(Ball::new(p)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind and precision of the arithmetic `c` builds.
    struct KindPrec;
    impl ArithVisitor for KindPrec {
        type Output = (Kind, u32);
        fn visit<A: Arith>(self, ar: A) -> Result<(Kind, u32)> {
            Ok((ar.kind(), ar.prec()))
        }
    }

    #[test]
    fn kind_and_prec_are_the_built_arithmetics() {
        for (name, prec) in [
            ("f64", None),
            ("f32", None),
            ("predictor", None),
            ("mpfr", None),
            ("mpfr", Some(64)),
            ("ball", None),
            ("ball", Some(200)),
        ] {
            let c = Choice::parse(name, prec).unwrap();
            assert_eq!(c.kind().name(), name);
            assert_eq!(c.with(KindPrec).unwrap(), (c.kind(), c.prec()), "{name}");
        }
        assert_eq!(Choice::parse("mpfr", None).unwrap().prec(), DEFAULT_PREC);
        assert_eq!(
            Choice::parse("ball", None).unwrap().prec(),
            DEFAULT_BALL_PREC
        );
    }

    #[test]
    fn refusals_name_the_argument() {
        let msg = |name, prec| Choice::parse(name, prec).unwrap_err().to_string();
        assert!(msg("f65", None).contains("`f65` is not one of f64, f32, mpfr, predictor, ball"));
        assert!(msg("f65", Some(3)).contains("arithmetic"));
        for name in ["f64", "f32", "predictor"] {
            assert!(msg(name, Some(128)).contains("has a fixed precision"));
        }
        assert_eq!(
            msg("mpfr", Some(53)),
            Mpfr::truth(53).unwrap_err().to_string()
        );
        assert_eq!(msg("ball", Some(1)), Ball::new(1).unwrap_err().to_string());
        assert!(Choice::Mpfr(2).with(KindPrec).is_err());
    }
}
