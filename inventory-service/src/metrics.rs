//! The service's own metrics (docs/contract.md §5): stock locks and deductions. Names are part of the
//! contract; [`register`] exposes every one of them at zero from start.

use std::time::Duration;

use platform::telemetry::metrics::zero_counter;

use crate::holds::view::HoldState;

/// `lock_acquisitions_total{result, backend}`: one per acquisition of the locks a deduction needs
/// (`acquired`, `timeout`, `bypassed` when Redis was unreachable), plus one `lost` per
/// holder that learned its locks were lost before commit.
pub const LOCK_ACQUISITIONS_TOTAL: &str = "lock_acquisitions_total";
/// `lock_wait_seconds`: time spent acquiring locks, successful or timed out.
pub const LOCK_WAIT_SECONDS: &str = "lock_wait_seconds";
/// `lock_renewals_total`: lock keys renewed by the watchdog.
pub const LOCK_RENEWALS_TOTAL: &str = "lock_renewals_total";
/// `deduction_version_conflicts_total`: deduction batches undone because another writer got
/// in first (an id of the batch recorded meanwhile, a row not as read), then retried.
pub const DEDUCTION_VERSION_CONFLICTS_TOTAL: &str = "deduction_version_conflicts_total";
/// `deductions_total{result}`: `POST /deductions` outcomes: `applied`, `insufficient_stock`,
/// `unknown_product`, `replayed`.
pub const DEDUCTIONS_TOTAL: &str = "deductions_total";

/// `hold_transitions_total{to}`: holds entering `HELD`, `CONFIRMED`, `CANCELLED`, `EXPIRED`.
pub const HOLD_TRANSITIONS_TOTAL: &str = "hold_transitions_total";
/// `holds_refused_total{reason}`: tries that held nothing: `insufficient_stock`,
/// `unknown_product`, `cancelled` (the cancel came first).
pub const HOLDS_REFUSED_TOTAL: &str = "holds_refused_total";
/// `holds_overdue`: holds still `HELD` past their deadline, as the last expiry sweep of this
/// instance left them (an alert watches it).
pub const HOLDS_OVERDUE: &str = "holds_overdue";

/// Outcome label of [`LOCK_ACQUISITIONS_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockResult {
    Acquired,
    Timeout,
}

/// Installs the recorder (once per process) and registers every metric at zero.
pub fn register() {
    platform::telemetry::metrics::handle();
    platform::messaging::relay::register_metrics();
    platform::messaging::consumer::register_metrics();
    metrics::describe_counter!(
        LOCK_ACQUISITIONS_TOTAL,
        "Stock lock acquisitions, by result: acquired, timeout, lost, bypassed"
    );
    metrics::describe_histogram!(
        LOCK_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Time spent acquiring stock locks"
    );
    metrics::describe_counter!(LOCK_RENEWALS_TOTAL, "Stock lock keys renewed while held");
    metrics::describe_counter!(
        DEDUCTION_VERSION_CONFLICTS_TOTAL,
        "Conditional stock updates that lost a race and were retried"
    );
    metrics::describe_counter!(
        DEDUCTIONS_TOTAL,
        "Direct deductions (POST /deductions), by result"
    );
    zero_counter(DEDUCTION_VERSION_CONFLICTS_TOTAL, "", &[]);
    zero_counter(
        DEDUCTIONS_TOTAL,
        "result",
        &[
            "applied",
            "insufficient_stock",
            "unknown_product",
            "replayed",
        ],
    );
    metrics::describe_counter!(HOLD_TRANSITIONS_TOTAL, "Hold state changes, by new state");
    metrics::describe_counter!(
        HOLDS_REFUSED_TOTAL,
        "Hold tries that held nothing, by reason"
    );
    metrics::describe_gauge!(
        HOLDS_OVERDUE,
        "Holds still HELD past their deadline after the last expiry sweep"
    );
    let states = HoldState::ALL.map(HoldState::as_str);
    zero_counter(HOLD_TRANSITIONS_TOTAL, "to", &states);
    zero_counter(
        HOLDS_REFUSED_TOTAL,
        "reason",
        &["insufficient_stock", "unknown_product", "cancelled"],
    );
    metrics::gauge!(HOLDS_OVERDUE).set(0.0);
}

/// Registers the stock lock's series at zero for the lock service start-up chose: the
/// `backend` label names it (`redis`, `redlock`, `etcd`, `database`).
pub fn register_lock(backend: &'static str) {
    for result in ["acquired", "timeout", "lost", "bypassed"] {
        metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => result, "backend" => backend)
            .absolute(0);
    }
    metrics::counter!(LOCK_RENEWALS_TOTAL, "backend" => backend).absolute(0);
    // Registering the histogram's handle is enough for the exporter to render it with
    // empty buckets.
    let _registered = metrics::histogram!(LOCK_WAIT_SECONDS, "backend" => backend);
}

pub fn lock_acquired(backend: &'static str, result: LockResult, waited: Duration) {
    let label = match result {
        LockResult::Acquired => "acquired",
        LockResult::Timeout => "timeout",
    };
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => label, "backend" => backend)
        .increment(1);
    metrics::histogram!(LOCK_WAIT_SECONDS, "backend" => backend).record(waited.as_secs_f64());
}

pub fn lock_bypassed(backend: &'static str) {
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => "bypassed", "backend" => backend)
        .increment(1);
}

pub fn lock_lost(backend: &'static str) {
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => "lost", "backend" => backend)
        .increment(1);
}

pub fn lock_renewed(backend: &'static str) {
    metrics::counter!(LOCK_RENEWALS_TOTAL, "backend" => backend).increment(1);
}

pub fn version_conflict() {
    metrics::counter!(DEDUCTION_VERSION_CONFLICTS_TOTAL).increment(1);
}

pub fn deduction(result: &'static str) {
    metrics::counter!(DEDUCTIONS_TOTAL, "result" => result).increment(1);
}

pub fn hold_transition(to: HoldState) {
    hold_transitions(to, 1);
}

pub fn hold_transitions(to: HoldState, count: u64) {
    metrics::counter!(HOLD_TRANSITIONS_TOTAL, "to" => to.as_str()).increment(count);
}

pub fn hold_refused(reason: &'static str) {
    metrics::counter!(HOLDS_REFUSED_TOTAL, "reason" => reason).increment(1);
}

pub fn holds_overdue(count: i64) {
    metrics::gauge!(HOLDS_OVERDUE).set(count as f64);
}
