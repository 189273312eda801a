//! `POST /deductions` by group commit, seen through the service: requests that queue while a
//! batch is applied go together in the next one, each judged as if alone and in order.
//!
//! To make batch boundaries certain, a test holds the product's lock from "another process":
//! the first request's leader waits for it, the next requests queue behind it (counted, not
//! timed), and releasing the lock lets the two batches run.

use std::time::Duration;

use inventory_service::deductions::BatchStats;
use inventory_service::stock::lock::{LockOptions, Locks};
use shared::ids::ProductId;
use tokio::task::JoinHandle;

use crate::helpers::{Answer, TestApp, eventually, patient};

const WAIT: Duration = Duration::from_secs(30);

/// A batch whose leader waits for a product's lock held by "another process": whatever is sent
/// meanwhile queues for the next batch.
struct HeldBatch {
    /// The lock; releasing it lets the batches run.
    held: Locks,
    /// The batch counts before the opener was sent.
    before: BatchStats,
    /// The opener's answer, once the batches ran.
    opener: JoinHandle<Answer>,
}

/// Takes `product`'s lock as another process would, sends `opener` alone and waits until its
/// batch was taken (and waits for the lock).
async fn open_behind_a_held_lock(
    app: &TestApp,
    product: i64,
    opener: (&str, &[(i64, i64)]),
) -> HeldBatch {
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_secs(30),
        wait: WAIT,
        renew: true,
    });
    let held = other_process
        .acquire(ProductId(product))
        .await
        .expect("the lock");
    assert!(!held.is_bypassed());
    let before = app.deductions.stats();
    let opener = app.deduct_in_task(opener.0, opener.1);
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.batches == before.batches + 1).then_some(()) }
    })
    .await;
    HeldBatch {
        held,
        before,
        opener,
    }
}

/// Sends `opener` alone, then `queued` one by one in this order while the opener's batch
/// waits for the product's lock, then lets everything run. Answers in the order sent.
async fn two_batches(
    app: &TestApp,
    product: i64,
    opener: (&str, &[(i64, i64)]),
    queued: &[(&str, &[(i64, i64)])],
) -> Vec<Answer> {
    let batch = open_behind_a_held_lock(app, product, opener).await;
    let mut tasks = vec![batch.opener];
    for (n, (id, items)) in queued.iter().enumerate() {
        tasks.push(app.deduct_in_task(id, items));
        app.waiting_reaches(n + 1).await;
    }
    batch.held.release().await;
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("the request finishes"));
    }
    let after = app.deductions.stats();
    assert_eq!(
        after.batches - batch.before.batches,
        2,
        "the opener, then all the others"
    );
    answers
}

/// Committing transactions that wrote deductions: rows inserted together share `xmin`.
async fn commits_that_wrote_deductions(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deductions")
        .fetch_one(app.db())
        .await
        .expect("a count")
}

#[tokio::test]
async fn a_short_stock_in_the_middle_of_a_batch_refuses_only_that_deduction() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 5).await;
    let queued: [(&str, &[(i64, i64)]); 4] = [
        ("a", &[(1, 2)]),
        ("too-big", &[(1, 3)]),
        ("b", &[(1, 2)]),
        ("one-too-many", &[(1, 1)]),
    ];
    let answers = two_batches(&app, 1, ("opener", &[(1, 1)]), &queued).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![200, 200, 409, 200, 409]);
    assert_eq!(app.stock(1).await, 0);
    assert_eq!(app.deduction_rows().await, 5, "every outcome recorded");
    assert_eq!(commits_that_wrote_deductions(&app).await, 2);
}

#[tokio::test]
async fn a_deduction_id_repeated_inside_one_batch_deducts_once_and_repeats_the_first_answer() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 10).await;
    let queued: [(&str, &[(i64, i64)]); 5] = [
        ("twice", &[(1, 2)]),
        ("twice", &[(1, 2)]),
        ("twice", &[(1, 3)]),
        ("short-twice", &[(1, 100)]),
        ("short-twice", &[(1, 100)]),
    ];
    let answers = two_batches(&app, 1, ("opener", &[(1, 1)]), &queued).await;
    let (first, again, other) = (&answers[1], &answers[2], &answers[3]);
    assert_eq!((first.status, first.replayed), (200, false));
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body, "the same body, byte for byte");
    assert_eq!(other.status, 422, "{:?}", other.body);
    let (short, short_again) = (&answers[4], &answers[5]);
    assert_eq!(
        (short.status, short_again.status, short_again.replayed),
        (409, 409, true)
    );
    assert_eq!(short_again.body, short.body);
    assert_eq!(app.stock(1).await, 10 - 1 - 2);
    assert_eq!(app.deduction_rows().await, 3, "opener, twice, short-twice");

    // Replayed from PostgreSQL once the batch committed; a batch of replays commits nothing.
    let commits = app.deductions.stats().commits;
    let replay = app
        .deduct_in_task("twice", &[(1, 2)])
        .await
        .expect("the replay");
    assert_eq!((replay.status, replay.replayed), (200, true));
    assert_eq!(replay.body, first.body);
    assert_eq!(app.deductions.stats().commits, commits);
    assert_eq!(app.stock(1).await, 7);
}

#[tokio::test]
async fn a_hundred_deductions_queued_on_one_product_take_one_commit() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 1_000).await;
    let ids: Vec<String> = (0..101).map(|n| format!("d-{n}")).collect();
    let batch = open_behind_a_held_lock(&app, 1, (&ids[0], &[(1, 1)])).await;
    let mut tasks = vec![batch.opener];
    tasks.extend(ids[1..].iter().map(|id| app.deduct_in_task(id, &[(1, 1)])));
    app.waiting_reaches(100).await;
    batch.held.release().await;
    for task in tasks {
        assert_eq!(task.await.expect("the request finishes").status, 200);
    }
    let after = app.deductions.stats();
    assert_eq!(
        after.commits - batch.before.commits,
        2,
        "101 deductions, two commits"
    );
    assert_eq!(commits_that_wrote_deductions(&app).await, 2);
    assert_eq!(app.stock(1).await, 1_000 - 101);
}

#[tokio::test]
async fn a_lone_deduction_is_a_batch_of_one_that_goes_at_once() {
    let app = TestApp::spawn().await;
    app.create_product(1, 3).await;
    let before = app.deductions.stats();
    assert_eq!(app.deduct("alone", &[(1, 1)]).await.status(), 200);
    let after = app.deductions.stats();
    assert_eq!(
        (
            after.batches - before.batches,
            after.commits - before.commits
        ),
        (1, 1)
    );
    assert_eq!(after.waiting, 0);
    assert_eq!(app.stock(1).await, 2);
}

#[tokio::test]
async fn a_deduction_whose_client_left_while_it_queued_is_not_applied() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 10).await;
    let batch = open_behind_a_held_lock(&app, 1, ("opener", &[(1, 1)])).await;
    let gone = app.deduct_in_task("gone", &[(1, 5)]);
    app.waiting_reaches(1).await;
    gone.abort();
    // The server learns of the closed connection and drops the waiting handler.
    let stayed = app.deduct_in_task("stayed", &[(1, 2)]);
    app.waiting_reaches(2).await;
    batch.held.release().await;
    assert_eq!(batch.opener.await.expect("the opener").status, 200);
    assert_eq!(stayed.await.expect("the one that stayed").status, 200);
    assert_eq!(
        app.stock(1).await,
        10 - 1 - 2,
        "the abandoned one deducted nothing"
    );
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deductions WHERE deduction_id = 'gone'")
            .fetch_one(app.db())
            .await
            .expect("a count");
    assert_eq!(recorded, 0);
}
