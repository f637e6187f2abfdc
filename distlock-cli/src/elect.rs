//! `distlock elect` and `distlock observe`: leader election from the command line, as
//! etcdctl's `elect` and `elect -l` do it, on every backend (an election over recorded
//! terms where the backend has permits, over a lease elsewhere: see
//! `distlock::Election`).

use std::sync::Arc;
use std::time::Duration;

use distlock::{
    DynLockBackend, Election, Error, FencingToken, Holder, Leader, LockClient, LockOptions,
    Observation,
};
use futures_util::StreamExt;

use crate::exit::{self, failed, say};
use crate::signals::Signals;

/// `distlock elect NAME VALUE`: campaigns, prints the term once elected, and leads
/// until SIGINT, SIGTERM or SIGHUP (then resigns, exit 0), or until the term is lost
/// (exit 75). A `wait` that runs out first exits 1, as a busy `run` does; a signal
/// during the campaign ends it (exit 0), giving back what it may have been granted.
pub(crate) async fn elect(
    backend: Arc<DynLockBackend>,
    name: &str,
    value: &str,
    wait: Option<Duration>,
    ttl: Duration,
    json: bool,
) -> u8 {
    let client = match LockClient::with_options(backend, LockOptions::default().with_ttl(ttl)) {
        Ok(client) => client,
        Err(e) => return failed(&e),
    };
    let election = match client.election(name) {
        Ok(election) => election,
        Err(e) => return failed(&e),
    };
    // Signals are taken before the campaign, so that one during the wait ends it too.
    let mut stops = Signals::new();
    let campaign = election.campaign(value, wait.unwrap_or(Duration::MAX));
    let leadership = tokio::select! {
        won = campaign => match won {
            Ok(leadership) => leadership,
            Err(e) if e.kind() == distlock::ErrorKind::Timeout => {
                say(format_args!("{name}: not elected within the wait: {e}"));
                return exit::BUSY;
            }
            Err(e) => return failed(&e),
        },
        _ = stops.next() => {
            // A grant the dropped campaign may still bring is given back before exit.
            election.flush().await;
            return 0;
        }
    };
    let term = Term {
        fence: leadership.fence(),
        value,
        holder: None,
    };
    print_term(name, "elected", Some(&term), json);
    let lost = leadership.lost();
    tokio::select! {
        reason = lost => {
            let reason = reason.map_or_else(|| "ended".to_owned(), |r| r.to_string());
            say(format_args!("{name}: the term was lost ({reason})"));
            client.flush().await;
            exit::LOST
        }
        _ = stops.next() => {
            let resigned = leadership.resign().await;
            election.flush().await;
            match resigned {
                Ok(()) => 0,
                Err(e) => failed(&e),
            }
        }
    }
}

/// `distlock observe NAME`: prints every term and vacancy, in order, until a signal,
/// or until `count` items are printed.
pub(crate) async fn observe(
    backend: Arc<DynLockBackend>,
    name: &str,
    count: Option<usize>,
    json: bool,
) -> u8 {
    let election: Result<Election, Error> = LockClient::new(backend).election(name);
    let election = match election {
        Ok(election) => election,
        Err(e) => return failed(&e),
    };
    let mut stops = Signals::new();
    let mut observations = election.observe();
    let mut printed = 0;
    while count.is_none_or(|count| printed < count) {
        let item = tokio::select! {
            item = observations.next() => item,
            _ = stops.next() => return 0,
        };
        match item {
            Some(Ok(observation)) => {
                print_observation(name, &observation, json);
                printed += 1;
            }
            // A retryable error: the observer looks again.
            Some(Err(e)) if e.is_retryable() => say(format_args!("{name}: {e}; looking again")),
            Some(Err(e)) => return failed(&e),
            None => break,
        }
    }
    0
}

/// A term as a line shows it.
struct Term<'a> {
    fence: FencingToken,
    value: &'a str,
    holder: Option<&'a Holder>,
}

impl<'a> Term<'a> {
    fn of(leader: &'a Leader) -> Self {
        Term {
            fence: leader.fence,
            value: &leader.value,
            holder: leader.holder.as_ref(),
        }
    }
}

fn print_observation(name: &str, observation: &Observation, json: bool) {
    match observation {
        Observation::Elected(leader) => print_term(name, "elected", Some(&Term::of(leader)), json),
        Observation::Proclaimed(leader) => {
            print_term(name, "proclaimed", Some(&Term::of(leader)), json)
        }
        Observation::Vacant => print_term(name, "vacant", None, json),
        Observation::Missed => print_term(name, "missed", None, json),
        _ => print_term(name, "changed", None, json),
    }
}

/// One line: `NAME: elected, term 7, value "10.0.0.1:80", by api-1:42`, or `NAME:
/// vacant`; with `json`, one JSON object.
fn print_term(name: &str, event: &str, term: Option<&Term<'_>>, json: bool) {
    if json {
        let mut line = serde_json::json!({ "election": name, "event": event });
        if let Some(term) = term {
            line["term"] = term.fence.get().into();
            line["value"] = term.value.into();
            if let Some(holder) = term.holder {
                line["holder"] = holder.id().into();
            }
        }
        println!("{line}");
        return;
    }
    match term {
        Some(term) => {
            let by = term
                .holder
                .map(|h| format!(", by {}", h.id()))
                .unwrap_or_default();
            println!(
                "{name}: {event}, term {}, value {:?}{by}",
                term.fence, term.value
            );
        }
        None if event == "missed" => {
            println!("{name}: missed (terms the backend no longer keeps)")
        }
        None => println!("{name}: {event}"),
    }
}
