//! An exact hypergeometric sampler for populations far beyond `f64`'s integers.
//!
//! `sample(good, bad, draws, rng)` returns how many good items a uniformly
//! random `draws`-subset of an urn with `good + bad` items holds. BCLO's
//! order-preserving encryption (see `ope`) draws one such value per tree node,
//! with urns of up to 2^96 items, so normal or binomial approximations would
//! change the distribution of ciphertexts; this sampler does not approximate.
//!
//! "Exact" means: the algorithms are exact rejection/inversion samplers of the
//! hypergeometric law in real arithmetic, evaluated in IEEE double precision.
//! Only floating-point rounding separates the output from the true law: the
//! log-pmf ratios that decide acceptance were within 2e-14 (absolute) of an
//! 80-digit reference for urns of 2^51 to 2^96 items at -6..8 standard
//! deviations, and the ratio-of-uniforms point is resolved to well under one
//! integer (it is taken relative to the mode). There is no truncation of
//! tails and no normal or binomial approximation.
//!
//! * Small supports (fewer than `INVERSION_LIMIT` values) use inversion: walk
//!   the pmf from 0 with the recurrence f(k+1)/f(k).
//! * Larger ones use HRUA, the ratio-of-uniforms sampler of Stadlober ("The
//!   ratio of uniforms approach for generating discrete random variates",
//!   J. Comput. Appl. Math. 31, 1990; ACM TOMS algorithm from 1989).
//!
//! Log-factorials of numbers near 2^96 are ~6e30, so HRUA's log f(k) - log f(mode)
//! cannot be a difference of two `lgamma` values. Instead every term is a
//! log-factorial *difference* ln((x+d)!/x!) with the offset d computed exactly
//! in integers, evaluated by Stirling's series in a cancellation-free form, and
//! the four first-order terms d·ln(·) are combined into one log of an exactly
//! computed (256-bit) ratio. All floating point goes through `libm`, so the
//! same coins give the same samples on every platform.
//!
//! The arithmetic here is frozen: OPE ciphertexts are functions of these
//! samples, so rewriting even an equivalent formula could move some stored
//! ciphertexts. `tests/crypto/vectors/ope_regression.json` guards against that.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

use crate::KernelError;

/// Supports smaller than this are sampled by inversion, larger ones by HRUA.
const INVERSION_LIMIT: u128 = 20;
/// 2 * sqrt(2 / e) and 3 - 2 * sqrt(3 / e): Stadlober's hat constants.
const D1: f64 = 1.715_527_769_921_413_5;
const D2: f64 = 0.898_916_162_058_898_8;
/// Arguments of ln Γ at or above this use Stirling's series (error < 1e-16).
const STIRLING_FROM: u128 = 16;

/// A uniform double in [0, 1) from the top 53 bits of one 64-bit output.
///
/// Written out rather than taken from `rand`'s distributions so that the
/// mapping from coins to samples can never change under us.
pub fn uniform01<R: RngCore>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// Number of good items among `draws` drawn without replacement from an urn
/// of `good` good and `bad` bad items. Requires `good + bad < 2^127` and
/// `draws <= good + bad`.
pub fn sample<R: RngCore>(good: u128, bad: u128, draws: u128, rng: &mut R) -> u128 {
    let total = good + bad;
    assert!(
        draws <= total,
        "cannot draw {draws} items from an urn of {total}"
    );
    // Reduce to draws <= total/2 and good <= bad by symmetry, as Stadlober does.
    let short = draws.min(total - draws);
    let (few, many) = (good.min(bad), good.max(bad));
    let mut k = if short == 0 || few == 0 {
        0
    } else if short.min(few) < INVERSION_LIMIT {
        inversion(few, many, short, rng)
    } else {
        hrua(few, many, short, rng)
    };
    if good > bad {
        k = short - k;
    }
    if short < draws {
        k = good - k;
    }
    k
}

/// `count` samples from the ChaCha20 stream of `seed` (for statistical tests).
pub fn sample_seeded(
    good: u128,
    bad: u128,
    draws: u128,
    seed: [u8; 32],
    count: usize,
) -> Result<Vec<u128>, KernelError> {
    let total = good.checked_add(bad).filter(|&t| t < 1 << 127);
    if total.is_none_or(|t| draws > t) {
        return Err(KernelError::Parameter(format!(
            "a hypergeometric urn needs good + bad < 2^127 and draws <= good + bad; \
             got good={good}, bad={bad}, draws={draws}"
        )));
    }
    let mut coins = ChaCha20Rng::from_seed(seed);
    Ok((0..count)
        .map(|_| sample(good, bad, draws, &mut coins))
        .collect())
}

/// Inversion for supports {0..=min(few, short)}; requires short <= total/2
/// and few <= many, so the support starts at 0 and f(0) >= 2^-20.
fn inversion<R: RngCore>(few: u128, many: u128, short: u128, rng: &mut R) -> u128 {
    let total = few + many;
    let top = few.min(short);
    // f(0) = C(many, short) / C(total, short), as a product of `top` ratios.
    let mut first = 1.0;
    for i in 0..top {
        first *= if few <= short {
            to_f64(total - short - i) / to_f64(total - i)
        } else {
            to_f64(many - i) / to_f64(total - i)
        };
    }
    loop {
        let mut u = uniform01(rng);
        let mut p = first;
        for k in 0..=top {
            if u < p {
                return k;
            }
            u -= p;
            let up = to_f64(few - k) * to_f64(short - k);
            let down = to_f64(k + 1) * to_f64(many - short + k + 1);
            p *= up / down;
        }
        // Rounding left a sliver of probability above the last value: redraw.
    }
}

/// Stadlober's HRUA for few <= many, INVERSION_LIMIT <= short <= total/2.
fn hrua<R: RngCore>(few: u128, many: u128, short: u128, rng: &mut R) -> u128 {
    let total = few + many;
    let (n, s) = (to_f64(total), to_f64(short));
    let (p, q) = (to_f64(few) / n, to_f64(many) / n);
    let var = (n - s) * s * p * q / (n - 1.0);
    let c = libm::sqrt(var + 0.5);
    let h = D1 * c + D2;
    let mode = floor_div(mul_wide(short + 1, few + 1), total + 2);
    // The hat's centre a = mean + 1/2 is kept as mode + (mean - mode + 1/2):
    // near 2^63 an f64 cannot tell neighbouring integers apart.
    let mean_excess = wide_small_diff(mul_wide(short, few), mul_wide(mode, total));
    let centre = to_f64_signed(mean_excess) / n + 0.5;
    let end = (short.min(few) + 1) as i128; // support is [0, end)
    loop {
        let u = uniform01(rng);
        let v = uniform01(rng);
        if u == 0.0 {
            continue;
        }
        let offset = libm::floor(centre + h * (v - 0.5) / u);
        if offset.is_nan() || offset.abs() >= 1e30 {
            continue; // far outside any support (or NaN)
        }
        let k = mode as i128 + offset as i128;
        if k < 0 || k >= end {
            continue;
        }
        let k = k as u128;
        let t = log_pmf_ratio(few, many, short, mode, k);
        if u * (4.0 - u) - 3.0 <= t {
            return k; // quick accept: u(4-u)-3 >= 2 ln u
        }
        if u * (u - t) >= 1.0 {
            continue; // quick reject: u - 1/u <= 2 ln u
        }
        if 2.0 * libm::log(u) <= t {
            return k;
        }
    }
}

/// ln f(k) - ln f(mode) for the hypergeometric pmf f with parameters
/// (few good, many bad, short draws); f(k) ∝ 1/(k! (few-k)! (short-k)! (many-short+k)!).
fn log_pmf_ratio(few: u128, many: u128, short: u128, mode: u128, k: u128) -> f64 {
    let delta = k as i128 - mode as i128;
    let terms = [
        (mode, delta),
        (few - mode, -delta),
        (short - mode, -delta),
        (many - short + mode, delta),
    ];
    let stirling = terms
        .iter()
        .all(|&(x, d)| x + 1 >= STIRLING_FROM && (x as i128 + d + 1) as u128 >= STIRLING_FROM);
    if !stirling {
        return -terms.iter().map(|&(x, d)| ln_fact_diff(x, d)).sum::<f64>();
    }
    // Each ln((x+d)!/x!) = rest + d ln(x+d+1); the four d ln(·) combine into
    // delta * ln(A B / (C D)), whose argument we know exactly in integers.
    let rest: f64 = terms.iter().map(|&(x, d)| stirling_rest(x, d)).sum();
    let (a, b) = (k + 1, many - short + k + 1);
    let (c, d) = (few - k + 1, short - k + 1);
    let ratio_minus_one = wide_diff_f64(mul_wide(a, b), mul_wide(c, d)) / (to_f64(c) * to_f64(d));
    let log_ratio = if (-0.5..=1.0).contains(&ratio_minus_one) {
        libm::log1p(ratio_minus_one)
    } else {
        ln(a) + ln(b) - ln(c) - ln(d)
    };
    -(rest + to_f64_signed(delta) * log_ratio)
}

/// ln((x+d)! / x!), for any x, x + d >= 0.
fn ln_fact_diff(x: u128, d: i128) -> f64 {
    let y = (x as i128 + d) as u128;
    if x + 1 >= STIRLING_FROM && y + 1 >= STIRLING_FROM {
        stirling_rest(x, d) + to_f64_signed(d) * ln(y + 1)
    } else {
        ln_fact(y) - ln_fact(x)
    }
}

/// ln Γ(z+d) - ln Γ(z) - d ln(z+d) with z = x + 1 >= STIRLING_FROM, z + d too.
///
/// From Stirling, ln Γ(z+d) - ln Γ(z) = (z - 1/2) ln1p(d/z) + d ln(z+d) - d
/// + corr(z+d) - corr(z); writing (z - 1/2) ln1p(t) - d = z (ln1p(t) - t)
/// - ln1p(t)/2 with t = d/z leaves only second-order terms, which are small.
fn stirling_rest(x: u128, d: i128) -> f64 {
    let z = to_f64(x + 1);
    let t = to_f64_signed(d) / z;
    let zd = to_f64_signed(x as i128 + d + 1);
    z * log1p_minus_x(t) - 0.5 * libm::log1p(t) + stirling_correction(zd) - stirling_correction(z)
}

/// ln(1 + t) - t without cancellation for small t.
fn log1p_minus_x(t: f64) -> f64 {
    if t.abs() >= 0.125 {
        return libm::log1p(t) - t;
    }
    // -t²/2 + t³/3 - t⁴/4 + ...; each term is at most 1/8 of the one before.
    let mut power = t * t;
    let mut sum = 0.0;
    for j in 2..40 {
        let term = power / j as f64;
        sum += if j % 2 == 0 { -term } else { term };
        if term.abs() <= 1e-18 * sum.abs() {
            break;
        }
        power *= t;
    }
    sum
}

/// ln Γ(z) - [(z - 1/2) ln z - z + ln(2π)/2], for z >= 16 (error < 1e-17).
fn stirling_correction(z: f64) -> f64 {
    let r = 1.0 / z;
    let r2 = r * r;
    r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 * (1.0 / 1680.0 - r2 / 1188.0))))
}

/// ln(x!) for any x (exact products below STIRLING_FROM, Stirling above).
fn ln_fact(x: u128) -> f64 {
    if x + 1 < STIRLING_FROM {
        let product: f64 = (2..=x).map(|i| i as f64).product(); // exact: 14! < 2^53
        return libm::log(product);
    }
    let z = to_f64(x + 1);
    (z - 0.5) * libm::log(z) - z
        + 0.5 * libm::log(2.0 * core::f64::consts::PI)
        + stirling_correction(z)
}

fn ln(x: u128) -> f64 {
    libm::log(to_f64(x))
}

/// `x as f64`, via the cheap u64 conversion when it fits (same rounding).
fn to_f64(x: u128) -> f64 {
    if x >> 64 == 0 {
        x as u64 as f64
    } else {
        x as f64
    }
}

/// `x as f64` for an i128, likewise.
fn to_f64_signed(x: i128) -> f64 {
    match i64::try_from(x) {
        Ok(small) => small as f64,
        Err(_) => x as f64,
    }
}

/// A 256-bit unsigned integer as (high, low) halves.
type Wide = (u128, u128);

/// The full 256-bit product of two u128 values.
fn mul_wide(a: u128, b: u128) -> Wide {
    const MASK: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & MASK);
    let (b1, b0) = (b >> 64, b & MASK);
    let low = a0 * b0;
    let mid1 = a1 * b0;
    let mid2 = a0 * b1;
    let high = a1 * b1;
    let (mid, mid_carry) = mid1.overflowing_add(mid2);
    let (lo, lo_carry) = low.overflowing_add(mid << 64);
    let hi = high + (mid >> 64) + ((mid_carry as u128) << 64) + lo_carry as u128;
    (hi, lo)
}

/// x - y for 256-bit x, y, rounded to the nearest-ish f64 (relative error ~2^-52).
fn wide_diff_f64(x: Wide, y: Wide) -> f64 {
    let (big, small, sign) = if x >= y { (x, y, 1.0) } else { (y, x, -1.0) };
    let (lo, borrow) = big.1.overflowing_sub(small.1);
    let hi = big.0 - small.0 - borrow as u128;
    sign * (to_f64(hi) * 2f64.powi(128) + to_f64(lo))
}

/// x - y for 256-bit x, y whose difference is known to lie in (-2^127, 2^127).
fn wide_small_diff(x: Wide, y: Wide) -> i128 {
    x.1.wrapping_sub(y.1) as i128
}

/// floor(x / y) for a 256-bit x whose quotient by y is below 2^100.
///
/// An f64 estimate is within 2^-50 relative of the quotient, so the exact
/// remainder x - e·y fits an i128 and fixes the last digits.
fn floor_div(x: Wide, y: u128) -> u128 {
    let estimate = ((to_f64(x.0) * 2f64.powi(128) + to_f64(x.1)) / to_f64(y)) as u128;
    let remainder = wide_small_diff(x, mul_wide(estimate, y));
    (estimate as i128 + remainder.div_euclid(y as i128)) as u128
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: u8) -> ChaCha20Rng {
        ChaCha20Rng::from_seed([seed; 32])
    }

    fn binomial(n: u128, k: u128) -> u128 {
        (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
    }

    fn exact_pmf(good: u128, bad: u128, draws: u128) -> Vec<f64> {
        let whole = binomial(good + bad, draws) as f64;
        (0..=draws.min(good))
            .map(|k| {
                let ways = if draws - k > bad {
                    0
                } else {
                    binomial(good, k) * binomial(bad, draws - k)
                };
                ways as f64 / whole
            })
            .collect()
    }

    /// Pearson's statistic over bins pooled to an expected count >= 5, and
    /// the 1 - 3e-7 quantile of chi-square (Wilson–Hilferty) for its df.
    fn chi_square(counts: &[u64], pmf: &[f64], n: f64) -> (f64, f64) {
        let mut bins: Vec<(f64, f64)> = Vec::new();
        let mut pending = (0.0, 0.0);
        for (&c, &p) in counts.iter().zip(pmf) {
            pending = (pending.0 + c as f64, pending.1 + p * n);
            if pending.1 >= 5.0 {
                bins.push(pending);
                pending = (0.0, 0.0);
            }
        }
        let last = bins.last_mut().unwrap();
        *last = (last.0 + pending.0, last.1 + pending.1);
        let stat = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
        let df = (bins.len() - 1) as f64;
        let z = 5.0;
        let crit = df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3);
        (stat, crit)
    }

    #[test]
    fn matches_the_exact_pmf_on_small_urns() {
        // Inversion, HRUA, and every symmetry reduction (good > bad, draws > half).
        let cases = [
            (5, 30, 12),
            (30, 5, 12),
            (40, 60, 50),
            (60, 40, 70),
            (25, 75, 30),
            (3, 97, 90),
        ];
        for (i, &(good, bad, draws)) in cases.iter().enumerate() {
            assert_fits((good, bad, draws), &exact_pmf(good, bad, draws), i as u8);
        }
    }

    /// Draws 200k samples and requires the chi-square test against `pmf` to pass.
    fn assert_fits((good, bad, draws): (u128, u128, u128), pmf: &[f64], seed: u8) {
        let mut counts = vec![0u64; pmf.len()];
        let mut coins = rng(seed);
        let n = 200_000;
        for _ in 0..n {
            counts[sample(good, bad, draws, &mut coins) as usize] += 1;
        }
        let (stat, crit) = chi_square(&counts, pmf, n as f64);
        assert!(stat < crit, "{good},{bad},{draws}: chi2 {stat} >= {crit}");
    }

    #[test]
    fn matches_the_pmf_on_a_large_urn() {
        // Large enough for the Stirling path; the pmf from direct log-factorials.
        let (good, bad, draws) = (400u128, 1_000_000u128, 500_000u128);
        let ln_choose = |n: u128, k: u128| ln_fact(n) - ln_fact(k) - ln_fact(n - k);
        let whole = ln_choose(good + bad, draws);
        let pmf: Vec<f64> = (0..=good)
            .map(|k| (ln_choose(good, k) + ln_choose(bad, draws - k) - whole).exp())
            .collect();
        assert_fits((good, bad, draws), &pmf, 42);
    }

    #[test]
    fn degenerate_urns_have_one_outcome() {
        let mut coins = rng(1);
        assert_eq!(sample(0, 10, 4, &mut coins), 0);
        assert_eq!(sample(10, 0, 4, &mut coins), 4);
        assert_eq!(sample(7, 9, 0, &mut coins), 0);
        assert_eq!(sample(7, 9, 16, &mut coins), 7);
        assert!(sample(1 << 64, 1 << 95, 1 << 95, &mut coins) <= 1 << 64);
    }

    #[test]
    fn huge_urns_have_the_right_mean_and_variance() {
        // A 32-bit OPE root: 2^32 good among 2^63, half of them drawn.
        let (good, total) = (1u128 << 32, 1u128 << 63);
        let draws = total / 2;
        let mean = good as f64 / 2.0;
        let var = mean * 0.5 * (1.0 - good as f64 / total as f64);
        let mut coins = rng(9);
        let n = 20_000;
        let xs: Vec<f64> = (0..n)
            .map(|_| sample(good, total - good, draws, &mut coins) as f64)
            .collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
        assert!(
            (m - mean).abs() < 5.0 * (var / n as f64).sqrt(),
            "mean {m} vs {mean}"
        );
        assert!((v / var - 1.0).abs() < 0.06, "variance {v} vs {var}");
        // Parity is a fine-grained check that values are not rounded to a grid.
        let odd = xs.iter().filter(|&&x| x as u128 % 2 == 1).count() as f64 / n as f64;
        assert!((odd - 0.5).abs() < 0.02, "odd fraction {odd}");
    }

    #[test]
    fn same_coins_give_same_samples() {
        let draw = |seed| {
            let mut coins = rng(seed);
            (0..50)
                .map(|_| sample(1 << 40, 1 << 80, 1 << 79, &mut coins))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn log_pmf_ratio_agrees_with_direct_log_factorials() {
        let (few, many, short) = (1000u128, 5000u128, 2000u128);
        let mode = floor_div(mul_wide(short + 1, few + 1), few + many + 2);
        let lf = |k: u128| {
            -(ln_fact(k) + ln_fact(few - k) + ln_fact(short - k) + ln_fact(many - short + k))
        };
        for k in [0, 100, 300, 333, 334, 400, 1000] {
            let direct = lf(k) - lf(mode);
            let fast = log_pmf_ratio(few, many, short, mode, k);
            assert!(
                (direct - fast).abs() < 1e-8 * direct.abs().max(1.0),
                "k={k}: {direct} vs {fast}"
            );
        }
    }

    #[test]
    fn wide_arithmetic_is_exact() {
        assert_eq!(mul_wide(u128::MAX, u128::MAX), (u128::MAX - 1, 1));
        assert_eq!(mul_wide(1 << 100, 1 << 100), (1 << 72, 0));
        let x = mul_wide((1 << 95) + 12345, (1 << 64) + 1);
        let y = (1u128 << 97) + 3;
        let q = floor_div(x, y);
        let back = mul_wide(q, y);
        assert!(back <= x && wide_diff_f64(x, back) < y as f64);
        assert_eq!(floor_div(mul_wide(1000, 7), 9), 777);
    }
}
