//! Helpers on non-negative multi-limb integers (64-bit limbs, least significant first),
//! shared by the ball dot products (`ball.rs`), the fixed-point kernels (`fixed.rs`) and
//! the correctly rounded exponential (`exp.rs`).
//!
//! This module sits beneath all three and imports nothing from `arith`, so they depend
//! on it and not on each other for limb arithmetic.

/// `out = a b` (limbs least significant first, `out.len() = a.len() + b.len()`), by
/// schoolbook multiplication (operands of a few limbs: cheaper inline than a GMP call).
#[inline(always)]
pub(super) fn mul_limbs(a: &[u64], b: &[u64], out: &mut [u64]) {
    out.fill(0);
    for (i, &ai) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &bj) in b.iter().enumerate() {
            // at most (2^64 - 1)^2 + 2 (2^64 - 1) = 2^128 - 1
            let t = ai as u128 * bj as u128 + out[i + j] as u128 + carry as u128;
            out[i + j] = t as u64;
            carry = (t >> 64) as u64;
        }
        out[i + b.len()] = carry;
    }
}

/// `out = v 2^bit` (`bit < 64`, `out.len() = v.len() + 1`).
#[inline(always)]
pub(super) fn shl_limbs(v: &[u64], bit: u32, out: &mut [u64]) {
    if bit == 0 {
        out[..v.len()].copy_from_slice(v);
        out[v.len()] = 0;
        return;
    }
    let mut prev = 0u64;
    for (o, &x) in out.iter_mut().zip(v) {
        *o = (x << bit) | (prev >> (64 - bit));
        prev = x;
    }
    out[v.len()] = prev >> (64 - bit);
}

/// `out = floor(v / 2^bit)` (`bit < 64`, `out.len() = v.len()`).
#[inline(always)]
pub(super) fn shr_limbs(v: &[u64], bit: u32, out: &mut [u64]) {
    if bit == 0 {
        out.copy_from_slice(v);
        return;
    }
    for (k, o) in out.iter_mut().enumerate() {
        let next = v.get(k + 1).map_or(0, |n| n << (64 - bit));
        *o = (v[k] >> bit) | next;
    }
}

/// `acc += v` (`v.len() <= acc.len()`), the carry propagated; returns the carry out of
/// `acc`'s top limb.
#[inline(always)]
pub(super) fn add_limbs(acc: &mut [u64], v: &[u64]) -> bool {
    let mut carry = false;
    let (low, high) = acc.split_at_mut(v.len());
    for (a, &x) in low.iter_mut().zip(v) {
        let (s1, c1) = a.overflowing_add(x);
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        *a = s2;
        carry = c1 | c2;
    }
    for a in high {
        if !carry {
            break;
        }
        (*a, carry) = a.overflowing_add(1);
    }
    carry
}

/// `a -= b` (same length), the borrow out.
pub(super) fn sub_limbs(a: &mut [u64], b: &[u64]) -> bool {
    let mut borrow = false;
    for (x, &y) in a.iter_mut().zip(b) {
        let (s1, b1) = x.overflowing_sub(y);
        let (s2, b2) = s1.overflowing_sub(u64::from(borrow));
        *x = s2;
        borrow = b1 | b2;
    }
    borrow
}

/// Compare two little-endian limb numbers of the same length.
pub(super) fn cmp_limbs(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        match x.cmp(y) {
            std::cmp::Ordering::Equal => continue,
            o => return o,
        }
    }
    std::cmp::Ordering::Equal
}
