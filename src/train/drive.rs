//! The one step loop. Every analysis that trains (run and twin, compare, judge, grid
//! cells, Lemma A.6, cost) drives a [`Stepper`] through [`drive`] and observes it; none
//! writes its own loop.
//!
//! ```text
//! loop:
//!     forward_backward                   (scores, attention, outputs, loss, gradient)
//!     observe(Forward)                   (record, measure, compare: at step k)
//!     stop at the last step
//!     update                             (step k -> k + 1)
//!     observe(Update)                    (progress, state saving)
//! ```
//!
//! Several trainers step in lockstep as one stepper: a pair `(S, T)` runs S then T in
//! each phase (its clock is S's), `Option<S>` is a stepper that may be absent, and
//! [`Prefix`] one that takes part only in the first steps of a run.

use crate::arith::Arith;
use crate::error::Result;
use crate::model::Model;

use super::Trainer;

/// Something that takes gradient steps: a forward and backward pass at the current
/// parameters, then an update.
pub trait Stepper {
    /// Evaluate the forward pass and the gradient at the current parameters.
    fn forward_backward(&mut self) -> Result<()>;
    /// One gradient step from the last forward pass.
    fn update(&mut self) -> Result<()>;
}

/// A stepper that knows how many steps it has done.
pub trait Clocked: Stepper {
    /// Updates done.
    fn step(&self) -> u64;
}

impl<A: Arith, M: Model> Stepper for Trainer<'_, A, M> {
    fn forward_backward(&mut self) -> Result<()> {
        Trainer::forward_backward(self)
    }

    fn update(&mut self) -> Result<()> {
        Trainer::update(self)
    }
}

impl<A: Arith, M: Model> Clocked for Trainer<'_, A, M> {
    fn step(&self) -> u64 {
        self.step
    }
}

/// Two steppers in lockstep: each phase runs the first, then the second.
impl<S: Stepper, T: Stepper> Stepper for (S, T) {
    fn forward_backward(&mut self) -> Result<()> {
        self.0.forward_backward()?;
        self.1.forward_backward()
    }

    fn update(&mut self) -> Result<()> {
        self.0.update()?;
        self.1.update()
    }
}

/// A lockstep pair runs on its first stepper's clock.
impl<S: Clocked, T: Stepper> Clocked for (S, T) {
    fn step(&self) -> u64 {
        self.0.step()
    }
}

/// An optional stepper (absent: nothing to do).
impl<S: Stepper> Stepper for Option<S> {
    fn forward_backward(&mut self) -> Result<()> {
        self.as_mut().map_or(Ok(()), Stepper::forward_backward)
    }

    fn update(&mut self) -> Result<()> {
        self.as_mut().map_or(Ok(()), Stepper::update)
    }
}

/// A stepper that takes part in a run only up to step `until`: its forward pass at
/// `until` is its last, and at the next update it is dropped, so the rest of the run
/// costs nothing (`compare` checks the bit-exact predictor over a prefix of the run).
#[derive(Debug, Clone)]
pub struct Prefix<S> {
    inner: Option<S>,
    until: u64,
}

impl<S: Clocked> Prefix<S> {
    /// `s` for its steps up to `until`.
    pub fn new(s: S, until: u64) -> Self {
        Prefix {
            inner: Some(s),
            until,
        }
    }

    /// The stepper while it takes part.
    pub fn get(&self) -> Option<&S> {
        self.inner.as_ref()
    }
}

impl<S: Clocked> Stepper for Prefix<S> {
    fn forward_backward(&mut self) -> Result<()> {
        self.inner.forward_backward()
    }

    fn update(&mut self) -> Result<()> {
        if self.inner.as_ref().is_some_and(|s| s.step() >= self.until) {
            self.inner = None;
        }
        self.inner.update()
    }
}

/// Where the driver is when it calls the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The forward pass at step `step()` is done (before the update, if any).
    Forward,
    /// The update to step `step()` is done.
    Update,
}

/// What the observer tells the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop here (the driver returns `Ok`).
    Stop,
}

/// Drive `s` from its current step to step `until`: a forward pass at every step from
/// the current one to `until` inclusive, observed, and an update after each but the
/// last, observed too. `observe` can stop the run early; its errors and the stepper's
/// (a non-finite value) end the run.
pub fn drive<S, F>(s: &mut S, until: u64, mut observe: F) -> Result<()>
where
    S: Clocked,
    F: FnMut(&S, Event) -> Result<Control>,
{
    loop {
        s.forward_backward()?;
        if observe(s, Event::Forward)? == Control::Stop || s.step() >= until {
            return Ok(());
        }
        s.update()?;
        if observe(s, Event::Update)? == Control::Stop {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stepper that logs what the driver asks of it.
    struct Log<'a>(u64, &'a std::cell::RefCell<Vec<String>>, &'static str);

    impl Stepper for Log<'_> {
        fn forward_backward(&mut self) -> Result<()> {
            self.1.borrow_mut().push(format!("{}f{}", self.2, self.0));
            Ok(())
        }
        fn update(&mut self) -> Result<()> {
            self.0 += 1;
            self.1.borrow_mut().push(format!("{}u{}", self.2, self.0));
            Ok(())
        }
    }

    impl Clocked for Log<'_> {
        fn step(&self) -> u64 {
            self.0
        }
    }

    /// Forward passes at every step up to `until` inclusive, updates between them,
    /// lockstep in order (a pair, then an absent and a present optional stepper), and
    /// the observer sees each event after all steppers have done it.
    #[test]
    fn lockstep_order_and_events() {
        let log = std::cell::RefCell::new(Vec::new());
        let mut s = (Log(1, &log, "a"), (None::<Log>, Some(Log(1, &log, "b"))));
        drive(&mut s, 3, |s, e| {
            log.borrow_mut().push(format!("{e:?}{}", s.step()));
            Ok(Control::Continue)
        })
        .unwrap();
        let want =
            "af1 bf1 Forward1 au2 bu2 Update2 af2 bf2 Forward2 au3 bu3 Update3 af3 bf3 Forward3";
        assert_eq!(log.borrow().join(" "), want);
    }

    /// A prefix takes part up to its last step, then costs nothing: forward passes at
    /// steps 1 and 2 only, an update between them, none after.
    #[test]
    fn a_prefix_stops_taking_part() {
        let log = std::cell::RefCell::new(Vec::new());
        let mut s = (Log(1, &log, "a"), Prefix::new(Log(1, &log, "b"), 2));
        drive(&mut s, 4, |s, e| {
            log.borrow_mut().push(format!("{e:?}{}", s.step()));
            assert_eq!(s.1.get().is_some(), s.step() <= 2);
            Ok(Control::Continue)
        })
        .unwrap();
        let want = "af1 bf1 Forward1 au2 bu2 Update2 af2 bf2 Forward2 au3 Update3 af3 Forward3 \
                    au4 Update4 af4 Forward4";
        assert_eq!(log.borrow().join(" "), want);
        assert!(s.1.get().is_none());
    }

    /// The observer stops the run early, at either event.
    #[test]
    fn the_observer_stops_the_run() {
        let log = std::cell::RefCell::new(Vec::new());
        let mut s = Log(0, &log, "");
        drive(&mut s, 10, |s, e| {
            Ok(match (e, s.step()) {
                (Event::Update, 2) => Control::Stop,
                _ => Control::Continue,
            })
        })
        .unwrap();
        assert_eq!(log.borrow().join(" "), "f0 u1 f1 u2");
        log.borrow_mut().clear();
        drive(&mut s, 10, |_, e| {
            Ok(match e {
                Event::Forward => Control::Stop,
                Event::Update => Control::Continue,
            })
        })
        .unwrap();
        assert_eq!(log.borrow().join(" "), "f2");
    }
}
