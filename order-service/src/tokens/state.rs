//! The states a token's key holds in Redis, as the Lua scripts of [`super::store`] write and
//! answer them: `issued[:<taker>]`, `inflight:<fingerprint>[@<taker>]:<claimed_at_ms>`,
//! `done:<first response as JSON>`; and what a claim found, read strictly.

use shared::ids::UserId;

use crate::tokens::StoredResponse;

pub(super) const ISSUED: &str = "issued";
pub(super) const IN_FLIGHT: &str = "inflight:";
pub(super) const DONE: &str = "done:";

/// A token's `issued` state for `taker`.
pub(super) fn issued(taker: Option<UserId>) -> String {
    match taker {
        Some(user) => format!("{ISSUED}:{user}"),
        None => ISSUED.to_owned(),
    }
}

/// A request's in-flight value before its claim time: its fingerprint and its taker.
pub(super) fn in_flight(fingerprint: &str, taker: Option<UserId>) -> String {
    match taker {
        Some(user) => format!("{IN_FLIGHT}{fingerprint}@{user}"),
        None => format!("{IN_FLIGHT}{fingerprint}"),
    }
}

/// What claiming a token found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The token was `issued`; this request now owns it.
    Claimed,
    /// Never issued, expired, or forgotten by Redis: ask PostgreSQL.
    Unknown,
    /// Issued, to another taker than the request's.
    IssuedTo(Option<UserId>),
    /// Another request holds it.
    InFlight {
        fingerprint: String,
        taker: Option<UserId>,
    },
    /// Already used; here is the first response.
    Done(StoredResponse),
}

/// Reads a state as the scripts answer it. A state this code cannot read is not guessed at:
/// it is logged as an error and the token is looked up in PostgreSQL, the truth Redis
/// caches, exactly as for a token Redis does not know.
pub(super) fn parse_state(state: &str) -> Claim {
    read_state(state).unwrap_or_else(|| {
        tracing::error!(
            state,
            "an idempotency token state that cannot be read; asking PostgreSQL"
        );
        Claim::Unknown
    })
}

fn read_state(state: &str) -> Option<Claim> {
    if state == "claimed" {
        Some(Claim::Claimed)
    } else if state.is_empty() {
        // No key.
        Some(Claim::Unknown)
    } else if let Some(rest) = state.strip_prefix(IN_FLIGHT) {
        let (claimant, _claimed_at) = rest.rsplit_once(':')?;
        let (fingerprint, taker) = match claimant.split_once('@') {
            Some((fingerprint, taker)) => (fingerprint, Some(parse_taker(taker)?)),
            None => (claimant, None),
        };
        Some(Claim::InFlight {
            fingerprint: fingerprint.to_owned(),
            taker,
        })
    } else if let Some(json) = state.strip_prefix(DONE) {
        serde_json::from_str(json).ok().map(Claim::Done)
    } else if state == ISSUED {
        Some(Claim::IssuedTo(None))
    } else {
        let taker = state.strip_prefix(ISSUED)?.strip_prefix(':')?;
        Some(Claim::IssuedTo(Some(parse_taker(taker)?)))
    }
}

fn parse_taker(raw: &str) -> Option<UserId> {
    raw.parse().ok().map(UserId)
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn states_parse() {
        assert_eq!(parse_state("claimed"), Claim::Claimed);
        assert_eq!(parse_state(""), Claim::Unknown);
        assert_eq!(
            parse_state("inflight:abc:123"),
            Claim::InFlight {
                fingerprint: "abc".into(),
                taker: None,
            }
        );
        assert_eq!(
            parse_state(&format!("{}:123", in_flight("abc", Some(UserId(7))))),
            Claim::InFlight {
                fingerprint: "abc".into(),
                taker: Some(UserId(7)),
            }
        );
        assert_eq!(parse_state(&issued(None)), Claim::IssuedTo(None));
        assert_eq!(
            parse_state(&issued(Some(UserId(7)))),
            Claim::IssuedTo(Some(UserId(7)))
        );
        let done = StoredResponse {
            fingerprint: "f".into(),
            order_id: Uuid::nil(),
            status: crate::tokens::ResponseStatus::ACCEPTED,
            body: "{}".into(),
            taker: Some(UserId(7)),
        };
        let raw = format!("done:{}", serde_json::to_string(&done).expect("json"));
        assert_eq!(parse_state(&raw), Claim::Done(done));
    }

    #[test]
    fn a_state_that_cannot_be_read_is_not_taken_for_another() {
        for unreadable in [
            "done:",
            "done:{",
            "issued:someone",
            "inflight:abc@x:1",
            "inflight:abc",
            "other",
        ] {
            assert_eq!(read_state(unreadable), None, "{unreadable}");
            assert_eq!(parse_state(unreadable), Claim::Unknown, "{unreadable}");
        }
    }
}
