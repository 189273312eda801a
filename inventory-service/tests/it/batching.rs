//! `POST /deductions` by group commit, seen through the service: requests that queue while a
//! batch is applied go together in the next one, each judged as if alone and in order.
//!
//! To make batch boundaries certain, a test holds the product's lock from "another process":
//! the first request's leader waits for it, the next requests queue behind it (counted, not
//! timed), and releasing the lock lets the two batches run.

use std::time::Duration;

use inventory_service::stock::lock::LockOptions;
use shared::ids::ProductId;
use tokio::task::JoinHandle;

use crate::helpers::{TestApp, eventually, patient};

const WAIT: Duration = Duration::from_secs(30);

/// One answer: status, whether it was a replay, body.
type Answer = (u16, bool, Vec<u8>);

fn send(app: &TestApp, id: &str, items: &[(i64, i64)]) -> JoinHandle<Answer> {
    let client = app.admin.clone();
    let url = app.url("/deductions");
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|(p, q)| serde_json::json!({"product_id": p, "quantity": q}))
        .collect();
    let body = serde_json::json!({"deduction_id": id, "items": items});
    tokio::spawn(async move {
        let response = client
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("POST /deductions");
        let status = response.status().as_u16();
        let replayed = response.headers().contains_key("idempotent-replayed");
        (
            status,
            replayed,
            response.bytes().await.expect("a body").to_vec(),
        )
    })
}

async fn waiting_reaches(app: &TestApp, waiting: usize) {
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.waiting == waiting).then_some(()) }
    })
    .await;
}

/// Sends `opener` alone, then `queued` one by one in this order while the opener's batch
/// waits for the product's lock, then lets everything run. Answers in the order sent.
async fn two_batches(
    app: &TestApp,
    product: i64,
    opener: (&str, &[(i64, i64)]),
    queued: &[(&str, &[(i64, i64)])],
) -> Vec<Answer> {
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
    let mut tasks = vec![send(app, opener.0, opener.1)];
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.batches == before.batches + 1).then_some(()) }
    })
    .await;
    for (n, (id, items)) in queued.iter().enumerate() {
        tasks.push(send(app, id, items));
        waiting_reaches(app, n + 1).await;
    }
    held.release().await;
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("the request finishes"));
    }
    let after = app.deductions.stats();
    assert_eq!(
        after.batches - before.batches,
        2,
        "the opener, then all the others"
    );
    answers
}

/// Committing transactions that wrote deductions: rows inserted together share `xmin`.
async fn commits_that_wrote_deductions(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deductions")
        .fetch_one(&app.db)
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
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
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
    assert_eq!((first.0, first.1), (200, false));
    assert_eq!((again.0, again.1), (200, true));
    assert_eq!(again.2, first.2, "the same body, byte for byte");
    assert_eq!(other.0, 422, "{:?}", other.2);
    let (short, short_again) = (&answers[4], &answers[5]);
    assert_eq!((short.0, short_again.0, short_again.1), (409, 409, true));
    assert_eq!(short_again.2, short.2);
    assert_eq!(app.stock(1).await, 10 - 1 - 2);
    assert_eq!(app.deduction_rows().await, 3, "opener, twice, short-twice");

    // Replayed from PostgreSQL once the batch committed; a batch of replays commits nothing.
    let commits = app.deductions.stats().commits;
    let replay = send(&app, "twice", &[(1, 2)]).await.expect("the replay");
    assert_eq!((replay.0, replay.1), (200, true));
    assert_eq!(replay.2, first.2);
    assert_eq!(app.deductions.stats().commits, commits);
    assert_eq!(app.stock(1).await, 7);
}

#[tokio::test]
async fn a_hundred_deductions_queued_on_one_product_take_one_commit() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 1_000).await;
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_secs(30),
        wait: WAIT,
        renew: true,
    });
    let held = other_process.acquire(ProductId(1)).await.expect("the lock");
    let before = app.deductions.stats();
    let ids: Vec<String> = (0..101).map(|n| format!("d-{n}")).collect();
    let mut tasks = vec![send(&app, &ids[0], &[(1, 1)])];
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.batches > before.batches).then_some(()) }
    })
    .await;
    tasks.extend(ids[1..].iter().map(|id| send(&app, id, &[(1, 1)])));
    waiting_reaches(&app, 100).await;
    held.release().await;
    for task in tasks {
        assert_eq!(task.await.expect("the request finishes").0, 200);
    }
    let after = app.deductions.stats();
    assert_eq!(
        after.commits - before.commits,
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
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_secs(30),
        wait: WAIT,
        renew: true,
    });
    let held = other_process.acquire(ProductId(1)).await.expect("the lock");
    let before = app.deductions.stats();
    let opener = send(&app, "opener", &[(1, 1)]);
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.batches > before.batches).then_some(()) }
    })
    .await;
    let gone = send(&app, "gone", &[(1, 5)]);
    waiting_reaches(&app, 1).await;
    gone.abort();
    // The server learns of the closed connection and drops the waiting handler.
    let stayed = send(&app, "stayed", &[(1, 2)]);
    waiting_reaches(&app, 2).await;
    held.release().await;
    assert_eq!(opener.await.expect("the opener").0, 200);
    assert_eq!(stayed.await.expect("the one that stayed").0, 200);
    assert_eq!(
        app.stock(1).await,
        10 - 1 - 2,
        "the abandoned one deducted nothing"
    );
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deductions WHERE deduction_id = 'gone'")
            .fetch_one(&app.db)
            .await
            .expect("a count");
    assert_eq!(recorded, 0);
}
