//! Windows security identifiers (SIDs) as plain data, so that the access decision and the
//! pipe-server check can be written and unit-tested on every platform. Only the FFI in
//! `win32.rs` turns a token's `PSID` into a [`Sid`] (through [`Sid::from_bytes`]).

use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Sub-authorities a SID may have (`SID_MAX_SUB_AUTHORITIES`).
const MAX_SUB_AUTHORITIES: usize = 15;
/// The identifier authority is 48 bits.
const MAX_AUTHORITY: u64 = (1 << 48) - 1;

/// A Windows SID, e.g. `S-1-5-18` (LocalSystem). `Copy`, so a [`Peer`](crate::server::Peer)
/// holding one stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sid {
    revision: u8,
    authority: u64,
    count: u8,
    sub: [u32; MAX_SUB_AUTHORITIES],
}

/// Why text or bytes are not a SID.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SidError {
    #[error(
        "`{text}` is not a SID: expected the form S-1-<authority>-<sub-authority>… (e.g. \
         S-1-5-21-1004336348-1177238915-682003330-1001; `whoami /user` prints yours)"
    )]
    BadText { text: String },
    #[error("malformed binary SID ({detail})")]
    BadBytes { detail: &'static str },
}

impl Sid {
    /// `S-1-5-18`, the LocalSystem account a Windows service runs as.
    pub const LOCAL_SYSTEM: Sid = Sid::well_known(5, &[18]);
    /// `S-1-5-32-544`, the built-in Administrators group.
    pub const ADMINISTRATORS: Sid = Sid::well_known(5, &[32, 544]);
    /// `S-1-5-11`, every authenticated user (the pipe's DACL lets them connect).
    pub const AUTHENTICATED_USERS: Sid = Sid::well_known(5, &[11]);
    /// `S-1-5-2`, logons from the network (refused by the pipe's DACL).
    pub const NETWORK: Sid = Sid::well_known(5, &[2]);

    const fn well_known(authority: u64, subs: &[u32]) -> Sid {
        let mut sub = [0; MAX_SUB_AUTHORITIES];
        let mut i = 0;
        while i < subs.len() {
            sub[i] = subs[i];
            i += 1;
        }
        Sid {
            revision: 1,
            authority,
            count: subs.len() as u8,
            sub,
        }
    }

    /// Reads the binary form (`revision`, sub-authority count, 48-bit big-endian authority,
    /// then little-endian 32-bit sub-authorities), exactly as long as its count says.
    pub fn from_bytes(bytes: &[u8]) -> Result<Sid, SidError> {
        let bad = |detail| SidError::BadBytes { detail };
        let (&revision, rest) = bytes.split_first().ok_or(bad("empty"))?;
        if revision != 1 {
            return Err(bad("revision is not 1"));
        }
        let (&count, rest) = rest.split_first().ok_or(bad("too short"))?;
        if usize::from(count) > MAX_SUB_AUTHORITIES {
            return Err(bad("more than 15 sub-authorities"));
        }
        if rest.len() != 6 + 4 * usize::from(count) {
            return Err(bad("length does not match the sub-authority count"));
        }
        let (auth, subs) = rest.split_at(6);
        let authority = auth.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
        let mut sub = [0; MAX_SUB_AUTHORITIES];
        for (slot, chunk) in sub.iter_mut().zip(subs.chunks_exact(4)) {
            *slot = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        Ok(Sid {
            revision,
            authority,
            count,
            sub,
        })
    }

    /// The binary form, as Windows stores it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.revision, self.count];
        out.extend_from_slice(&self.authority.to_be_bytes()[2..]);
        for s in self.sub_authorities() {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    pub fn sub_authorities(&self) -> &[u32] {
        &self.sub[..usize::from(self.count)]
    }
}

impl FromStr for Sid {
    type Err = SidError;

    /// Parses `S-1-<authority>-<sub>…` (case-insensitive `S`; decimal, or `0x…` hex for the
    /// authority as Windows prints authorities above 2^32).
    fn from_str(text: &str) -> Result<Sid, SidError> {
        let bad = || SidError::BadText {
            text: text.to_owned(),
        };
        let mut parts = text.trim().split('-');
        if !parts.next().is_some_and(|s| s.eq_ignore_ascii_case("s")) {
            return Err(bad());
        }
        if parts.next() != Some("1") {
            return Err(bad());
        }
        let authority = match parts.next() {
            Some(a) => match a.strip_prefix("0x").or_else(|| a.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).map_err(|_| bad())?,
                None if a.bytes().all(|b| b.is_ascii_digit()) => a.parse().map_err(|_| bad())?,
                None => return Err(bad()),
            },
            None => return Err(bad()),
        };
        if authority > MAX_AUTHORITY {
            return Err(bad());
        }
        let mut sub = [0; MAX_SUB_AUTHORITIES];
        let mut count = 0;
        for part in parts {
            if count == MAX_SUB_AUTHORITIES || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            sub[count] = part.parse().map_err(|_| bad())?;
            count += 1;
        }
        Ok(Sid {
            revision: 1,
            authority,
            count: count as u8,
            sub,
        })
    }
}

impl fmt::Display for Sid {
    /// The standard string form; authorities of 2^32 and above in hex, as Windows does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S-{}-", self.revision)?;
        if self.authority >= 1 << 32 {
            write!(f, "0x{:012X}", self.authority)?;
        } else {
            write!(f, "{}", self.authority)?;
        }
        for s in self.sub_authorities() {
            write!(f, "-{s}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "S-1-5-21-1004336348-1177238915-682003330-1001";

    #[test]
    fn text_round_trips_and_well_known_sids_print_as_windows_does() {
        let sid: Sid = USER.parse().unwrap();
        assert_eq!(sid.to_string(), USER);
        assert_eq!(sid.sub_authorities().len(), 5);
        assert_eq!(Sid::LOCAL_SYSTEM.to_string(), "S-1-5-18");
        assert_eq!(Sid::ADMINISTRATORS.to_string(), "S-1-5-32-544");
        assert_eq!("s-1-5-18".parse::<Sid>().unwrap(), Sid::LOCAL_SYSTEM);
        assert_eq!(
            " S-1-5-32-544 ".parse::<Sid>().unwrap(),
            Sid::ADMINISTRATORS
        );
        // Authorities from 2^32 on print in hex, smaller ones in decimal.
        let big: Sid = "S-1-0x000100000000-1".parse().unwrap();
        assert_eq!(big.to_string(), "S-1-0x000100000000-1");
        let small: Sid = "S-1-0x0000FFFFFFFF-1".parse().unwrap();
        assert_eq!(small.to_string(), "S-1-4294967295-1");
    }

    #[test]
    fn binary_form_matches_the_windows_layout() {
        // LocalSystem as Windows stores it: rev 1, 1 sub-authority, NT authority 5, 18 LE.
        let bytes = [1, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0];
        assert_eq!(Sid::from_bytes(&bytes).unwrap(), Sid::LOCAL_SYSTEM);
        assert_eq!(Sid::LOCAL_SYSTEM.to_bytes(), bytes);
        let sid: Sid = USER.parse().unwrap();
        assert_eq!(Sid::from_bytes(&sid.to_bytes()).unwrap(), sid);
        assert_eq!(sid.to_bytes().len(), 8 + 4 * 5);
    }

    #[test]
    fn malformed_input_is_an_error_naming_the_form() {
        for text in [
            "",
            "S-1",
            "X-1-5-18",
            "S-2-5-18",
            "S-1-5-eighteen",
            "S-1-5--18",
            "S-1-5-+18",
            "S-1-5-4294967296",
            "S-1-281474976710656-1",
            "S-1-5-1-2-3-4-5-6-7-8-9-10-11-12-13-14-15-16",
            "alice",
        ] {
            let e = text.parse::<Sid>().unwrap_err();
            assert!(e.to_string().contains("whoami /user"), "{text}: {e}");
        }
        for bytes in [
            &[][..],
            &[2, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0],
            &[1, 2, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0],
            &[1, 16],
            &[1, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0, 0],
        ] {
            assert!(Sid::from_bytes(bytes).is_err(), "{bytes:?}");
        }
    }
}
