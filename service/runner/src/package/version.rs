//! Ordering runner versions, so "current" and "previous" survive a restart without a
//! marker file: the newest two installed versions are kept.

use std::cmp::Ordering;

/// Compares dotted versions numerically part by part (`2.10.0 > 2.9.1`); a part that is not
/// a number compares as text after numbers, so odd versions still order deterministically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let mut left = a.split(['.', '-', '+']);
    let mut right = b.split(['.', '-', '+']);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return a.cmp(b),
            (Some(_), None) => return Ordering::Greater,
            (None, Some(_)) => return Ordering::Less,
            (Some(x), Some(y)) => {
                let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_numerically() {
        assert_eq!(compare_versions("2.10.0", "2.9.1"), Ordering::Greater);
        assert_eq!(compare_versions("2.336.0", "2.336.0"), Ordering::Equal);
        assert_eq!(compare_versions("2.336", "2.336.1"), Ordering::Less);
    }
}
