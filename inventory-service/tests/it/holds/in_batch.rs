//! Ends of holds taken by this process ride in the next batch of their products: one commit
//! with the tries and deductions queued beside them, a cancel's units back in the same update
//! (so the leader's remembered stock stays true and the next batch need not read), and every
//! end the batch cannot decide answered the general way, exactly as before.

use std::time::Duration;

use serde_json::Value;
use testkit::Backend;
use tokio::task::JoinHandle;

use super::assert_stock_adds_up;
use crate::helpers::{TestApp, assert_problem, eventually, patient};

const WAIT: Duration = Duration::from_secs(30);

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    confirms_and_cancels_of_holds_taken_here_commit_with_the_next_batch_of_their_products,
    an_end_its_batch_cannot_decide_is_decided_and_worded_the_general_way,
    a_cancel_in_a_batch_past_the_deadline_expires_the_hold_and_gives_its_units_back_once,
    a_cancel_routed_by_a_reused_hold_id_gives_back_every_unit_of_the_hold_now_under_it,
);

/// `POST /holds/{id}/{step}` in a task: status and body.
fn end_in_task(app: &TestApp, hold_id: &str, step: &str) -> JoinHandle<(u16, Value)> {
    let request = app.admin.post(app.url(&format!("/holds/{hold_id}/{step}")));
    tokio::spawn(async move {
        let response = request.send().await.expect("an end");
        (
            response.status().as_u16(),
            response.json().await.expect("a body"),
        )
    })
}

/// `POST /holds` in a task: the status.
fn hold_in_task(app: &TestApp, hold_id: &str, items: &[(i64, i64)]) -> JoinHandle<u16> {
    let request =
        app.admin
            .post(app.url("/holds"))
            .json(&super::hold_body(hold_id, items, Some(600)));
    tokio::spawn(async move { request.send().await.expect("a try").status().as_u16() })
}

async fn confirms_and_cancels_of_holds_taken_here_commit_with_the_next_batch_of_their_products(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, patient).await;
    app.create_product(1, 1_000).await;
    for i in 0..30 {
        assert_eq!(
            app.hold(&format!("h-{i:02}"), &[(1, 2)], Some(600))
                .await
                .status(),
            201
        );
    }
    assert_eq!(app.deductions.held_here(), 30);

    // Another process holds the product's lock: the opener's batch waits for it, and
    // everything sent meanwhile queues for the batch after.
    let held = app.lock_held_elsewhere(1).await;
    let before = app.deductions.stats();
    let opener = app.deduct_in_task("opener", &[(1, 1)]);
    let deductions = app.deductions.clone();
    eventually(WAIT, || {
        let stats = deductions.stats();
        async move { (stats.batches == before.batches + 1).then_some(()) }
    })
    .await;
    let confirms: Vec<_> = (0..20)
        .map(|i| end_in_task(&app, &format!("h-{i:02}"), "confirm"))
        .collect();
    let cancels: Vec<_> = (20..30)
        .map(|i| end_in_task(&app, &format!("h-{i:02}"), "cancel"))
        .collect();
    let tries: Vec<_> = (0..10)
        .map(|i| hold_in_task(&app, &format!("new-{i}"), &[(1, 3)]))
        .collect();
    app.waiting_reaches(40).await;
    held.release().await;

    assert_eq!(opener.await.expect("the opener").status, 200);
    for confirm in confirms {
        let (status, hold) = confirm.await.expect("a confirm");
        assert_eq!((status, hold["state"].as_str()), (200, Some("CONFIRMED")));
        assert_eq!(hold["items"][0]["quantity"], 2, "{hold}");
    }
    for cancel in cancels {
        let (status, hold) = cancel.await.expect("a cancel");
        assert_eq!((status, hold["state"].as_str()), (200, Some("CANCELLED")));
        assert!(hold["expires_at"].is_string(), "{hold}");
    }
    for try_ in tries {
        assert_eq!(try_.await.expect("a try"), 201);
    }
    let after = app.deductions.stats();
    assert_eq!(
        (
            after.commits - before.commits,
            after.ends - before.ends,
            after.reads - before.reads
        ),
        (2, 30, 1),
        "the opener's batch read and committed; the 40 after it rode in one commit, judged \
         against the stock the opener's batch left (the cancels' units went into that \
         batch's own update, so its memory stayed true)"
    );
    // Sold: 1 + 20 × 2; held: 10 × 3 new; the ten cancelled gave their 20 back.
    assert_eq!(app.stock_and_held(1).await, (1_000 - 41 - 30, 30));
    assert_stock_adds_up(&app, 1, 1_000).await;
    // The ten new holds are remembered; every ended one is forgotten.
    assert_eq!(app.deductions.held_here(), 10);

    // A repeat of an end is answered the general way, with the outcome of the first.
    let again = app.ended_hold("h-00", "confirm").await;
    assert_eq!(again["state"], "CONFIRMED");
    assert_problem(app.end_hold("h-20", "confirm").await, 409, "hold-cancelled").await;
    assert_eq!(
        app.deductions.stats().ends,
        after.ends,
        "neither rode in a batch"
    );
}

async fn an_end_its_batch_cannot_decide_is_decided_and_worded_the_general_way(backend: Backend) {
    let a = TestApp::spawn_on(backend, |_| {}).await;
    let url = a.config.database_urls[0].clone();
    let b = TestApp::spawn_on(backend, move |c| c.database_urls = vec![url]).await;
    a.create_product(1, 100).await;
    for id in ["due", "sold-elsewhere", "taken-elsewhere"] {
        let app = if id == "taken-elsewhere" { &b } else { &a };
        assert_eq!(app.hold(id, &[(1, 5)], Some(600)).await.status(), 201);
    }
    let before = a.deductions.stats().ends;

    // Past its deadline by the database's clock: the batch's confirm changes nothing, and
    // the general way refuses it.
    a.make_due("due").await;
    assert_problem(a.end_hold("due", "confirm").await, 409, "hold-expired").await;

    // Confirmed by another instance: the cancel here finds it no longer HELD.
    assert_eq!(
        b.ended_hold("sold-elsewhere", "confirm").await["state"],
        "CONFIRMED"
    );
    assert_problem(
        a.end_hold("sold-elsewhere", "cancel").await,
        409,
        "hold-confirmed",
    )
    .await;

    // Taken by the other instance: unknown here, ended the general way.
    assert_eq!(
        a.ended_hold("taken-elsewhere", "cancel").await["state"],
        "CANCELLED"
    );
    assert_eq!(
        a.deductions.stats().ends,
        before,
        "no end was decided in a batch"
    );

    // The expired hold's units are back once, the sold ones gone, the cancelled ones back.
    let due = a.ended_hold("due", "cancel").await;
    assert_eq!(due["state"], "EXPIRED");
    assert_eq!(a.stock_and_held(1).await, (95, 0));
    assert_stock_adds_up(&a, 1, 100).await;
}

async fn a_cancel_in_a_batch_past_the_deadline_expires_the_hold_and_gives_its_units_back_once(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    assert_eq!(app.hold("late", &[(1, 4)], Some(600)).await.status(), 201);
    app.make_due("late").await;
    let before = app.deductions.stats().ends;
    let hold = app.ended_hold("late", "cancel").await;
    assert_eq!(hold["state"], "EXPIRED");
    assert_eq!(
        app.deductions.stats().ends,
        before + 1,
        "decided in a batch"
    );
    assert_eq!(app.stock_and_held(1).await, (10, 0));
    let again = app.ended_hold("late", "cancel").await;
    assert_eq!(again["state"], "EXPIRED");
    assert_eq!(app.stock_and_held(1).await, (10, 0), "given back once");
    assert_stock_adds_up(&app, 1, 10).await;
}

/// A process remembers the products of the holds it took until an end of them reaches it. A
/// hold ended elsewhere, its row deleted after the retention period and its id used again on
/// other products is still remembered by its first products: a cancel reaching that process
/// rides in their batch, which must not end a hold it cannot give back.
async fn a_cancel_routed_by_a_reused_hold_id_gives_back_every_unit_of_the_hold_now_under_it(
    backend: Backend,
) {
    let a = TestApp::spawn_on(backend, |_| {}).await;
    let url = a.config.database_urls[0].clone();
    let b = TestApp::spawn_on(backend, move |c| c.database_urls = vec![url]).await;
    a.create_product(1, 10).await;
    a.create_product(2, 10).await;
    assert_eq!(a.hold("reused", &[(1, 2)], Some(600)).await.status(), 201);
    assert_eq!(b.ended_hold("reused", "cancel").await["state"], "CANCELLED");
    let deleted = a
        .database
        .execute(
            "DELETE FROM holds WHERE hold_id = 'reused'",
            "DELETE FROM holds WHERE hold_id = 'reused'",
        )
        .await;
    assert_eq!(
        deleted, 1,
        "the finished hold's row is gone, as after the retention"
    );
    assert_eq!(b.hold("reused", &[(2, 3)], Some(600)).await.status(), 201);
    assert_eq!(a.stock_and_held(2).await, (7, 3));
    assert_eq!(
        a.deductions.held_here(),
        1,
        "`a` still routes the id to product 1"
    );

    let hold = a.ended_hold("reused", "cancel").await;
    assert_eq!(hold["state"], "CANCELLED");
    assert_eq!(hold["items"][0]["product_id"], 2, "{hold}");
    assert_eq!(a.stock_and_held(2).await, (10, 0), "every unit back");
    assert_eq!(a.stock_and_held(1).await, (10, 0));
    let again = a.ended_hold("reused", "cancel").await;
    assert_eq!(again["state"], "CANCELLED");
    assert_eq!(a.stock_and_held(2).await, (10, 0), "given back once");
    assert_stock_adds_up(&a, 1, 10).await;
    assert_stock_adds_up(&a, 2, 10).await;
}
