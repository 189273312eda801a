//! Holds decided once under races: confirms against the expiry from two instances, the sweep
//! of two instances, a burst of holds, deductions and orders on one hot product, and an
//! instance killed with holds due.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use testkit::{AmqpProbe, Backend, BackendDatabase, KilledOnDrop, TestVhost, eventually};
use uuid::Uuid;

use super::{assert_stock_adds_up, hold_body};
use crate::helpers::{TestApp, publish_order_created};

/// A second instance on `first`'s database, sweeping as often as `first` does.
async fn second_instance(first: &TestApp) -> TestApp {
    let (url, every) = (
        first.config.database_urls[0].clone(),
        first.config.hold_expiry_interval,
    );
    TestApp::spawn_on(first.database.backend(), move |c| {
        c.database_urls = vec![url];
        c.hold_expiry_interval = every;
    })
    .await
}

async fn sweeping_every_50_ms(backend: Backend) -> TestApp {
    TestApp::spawn_on(backend, |c| {
        c.hold_expiry_interval = Duration::from_millis(50)
    })
    .await
}

/// The state of `hold_id`, as `GET /holds/{id}` reads it.
async fn state_of(app: &TestApp, hold_id: &str) -> String {
    let hold: Value = app.read_hold(hold_id).await.json().await.expect("a hold");
    hold["state"].as_str().expect("a state").to_owned()
}

/// Waits until no hold is `HELD` any more.
async fn until_none_held(app: &TestApp) {
    eventually(Duration::from_secs(30), || async {
        let held = app
            .database
            .count("SELECT count(*) FROM holds WHERE state = 'HELD'")
            .await;
        (held == 0).then_some(())
    })
    .await;
}

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    confirms_racing_the_expiry_from_two_instances_end_each_hold_one_way,
    holds_deductions_and_orders_on_one_hot_product_keep_their_own_outcomes,
    confirms_and_cancels_sent_at_once_are_each_decided_as_if_alone,
    two_instances_sweeping_at_once_expire_each_hold_once,
    holds_due_when_an_instance_is_killed_still_expire_once,
);

async fn confirms_racing_the_expiry_from_two_instances_end_each_hold_one_way(backend: Backend) {
    const HOLDS: usize = 40;
    let a = sweeping_every_50_ms(backend).await;
    let b = second_instance(&a).await;
    a.create_product(1, 1_000).await;
    let mut deadlines = Vec::new();
    for i in 0..HOLDS {
        let hold: Value = a
            .hold(&format!("h-{i:02}"), &[(1, 2)], Some(2))
            .await
            .json()
            .await
            .expect("a hold");
        let deadline: DateTime<Utc> = hold["expires_at"]
            .as_str()
            .expect("a deadline")
            .parse()
            .expect("RFC 3339");
        deadlines.push(deadline);
    }
    // Each hold gets one confirm from each instance, spread from 150 ms before its deadline to
    // 150 ms after, so some land before it, some after, some while a sweep runs.
    let mut confirms = Vec::new();
    for (i, deadline) in deadlines.iter().enumerate() {
        for (n, app) in [&a, &b].into_iter().enumerate() {
            let offset = (i * 7 + n * 3) as i64 - 150;
            let at = *deadline + chrono::TimeDelta::milliseconds(offset);
            let request = app.admin.post(app.url(&format!("/holds/h-{i:02}/confirm")));
            confirms.push(tokio::spawn(async move {
                let wait = (at - Utc::now()).to_std().unwrap_or_default();
                tokio::time::sleep(wait).await;
                (
                    i,
                    request.send().await.expect("a confirm").status().as_u16(),
                )
            }));
        }
    }
    let mut confirmed = [false; HOLDS];
    for confirm in confirms {
        let (i, status) = confirm.await.expect("a confirm task");
        assert!(status == 200 || status == 409, "hold {i}: {status}");
        confirmed[i] |= status == 200;
    }
    until_none_held(&a).await;
    for (i, confirmed) in confirmed.iter().enumerate() {
        let id = format!("h-{i:02}");
        let state = state_of(&a, &id).await;
        let expected = if *confirmed { "CONFIRMED" } else { "EXPIRED" };
        assert_eq!(
            state, expected,
            "{id}: a confirm answered 200 exactly when it is confirmed"
        );
    }
    let sold = confirmed.iter().filter(|c| **c).count() as i64;
    assert_eq!(
        a.stock_and_held(1).await,
        (1_000 - 2 * sold, 0),
        "expired units back once"
    );
    assert_stock_adds_up(&a, 1, 1_000).await;
}

async fn two_instances_sweeping_at_once_expire_each_hold_once(backend: Backend) {
    let a = sweeping_every_50_ms(backend).await;
    let b = second_instance(&a).await;
    for product in 1..=5 {
        a.create_product(product, 1_000).await;
    }
    let tries: Vec<_> = (0..500)
        .map(|i| {
            let app = if i % 2 == 0 { &a } else { &b };
            let product = 1 + (i % 5);
            let request = app.admin.post(app.url("/holds")).json(&hold_body(
                &format!("h-{i}"),
                &[(product, 1 + i % 3), (product % 5 + 1, 1)],
                Some(600),
            ));
            tokio::spawn(async move { request.send().await.expect("a try").status().as_u16() })
        })
        .collect();
    for answer in tries {
        assert_eq!(answer.await.expect("a try task"), 201);
    }
    a.database
        .execute(
            "UPDATE holds SET expires_at = now()",
            "UPDATE holds SET expires_at = CURRENT_TIMESTAMP(6)",
        )
        .await;
    until_none_held(&a).await;
    let not_expired = "SELECT count(*) FROM holds WHERE state <> 'EXPIRED'";
    assert_eq!(a.database.count(not_expired).await, 0);
    for product in 1..=5 {
        assert_eq!(
            a.stock_and_held(product).await,
            (1_000, 0),
            "product {product} back once"
        );
        assert_stock_adds_up(&a, product, 1_000).await;
    }
}

async fn holds_deductions_and_orders_on_one_hot_product_keep_their_own_outcomes(backend: Backend) {
    const EACH: usize = 80;
    const STOCK: i64 = 100;
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, STOCK).await;
    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    let orders: Vec<Uuid> = (0..EACH).map(|_| Uuid::now_v7()).collect();
    let mut answers = Vec::new();
    for i in 0..EACH {
        let hold = app.admin.post(app.url("/holds")).json(&hold_body(
            &format!("h-{i}"),
            &[(1, 1)],
            Some(600),
        ));
        answers.push(tokio::spawn(async move {
            ("hold", hold.send().await.expect("a try").status().as_u16())
        }));
        let deduction = app.deduct_in_task(&format!("d-{i}"), &[(1, 1)]);
        answers.push(tokio::spawn(async move {
            ("deduction", deduction.await.expect("a deduction").status)
        }));
    }
    for order in &orders {
        publish_order_created(&probe, *order, &[(1, 1)]).await;
    }
    let (mut held, mut deducted) = (0_i64, 0_i64);
    for answer in answers {
        match answer.await.expect("an answer") {
            ("hold", 201) => held += 1,
            ("deduction", 200) => deducted += 1,
            (_, 409) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let reserved: i64 = eventually(Duration::from_secs(30), || async {
        let decided = app
            .database
            .count("SELECT count(*) FROM reservations")
            .await;
        let applied = app
            .database
            .count("SELECT count(*) FROM reservations WHERE state = 'APPLIED'")
            .await;
        (decided == EACH as i64).then_some(applied)
    })
    .await;
    assert_eq!(
        held + deducted + reserved,
        STOCK,
        "every unit taken once, none oversold"
    );
    assert_eq!(app.stock_and_held(1).await, (0, held));
    let refused_holds = app
        .database
        .count("SELECT count(*) FROM holds WHERE state = 'REFUSED'")
        .await;
    assert_eq!(
        refused_holds,
        EACH as i64 - held,
        "each hold kept its own outcome"
    );
}

async fn holds_due_when_an_instance_is_killed_still_expire_once(backend: Backend) {
    const HOLDS: usize = 300;
    let db = BackendDatabase::create(
        backend,
        "inventory_holds_kill",
        inventory_service::migrators(),
    )
    .await;
    let vhost = TestVhost::create();
    let product = "INSERT INTO products (product_id, name, stock) VALUES (1, 'Held', 10000)";
    db.execute(product, product).await;
    let admin = "kill-admin-token";
    let start = |port: u16| {
        let mut command = testkit::service_command_on(
            port,
            env!("CARGO_BIN_EXE_inventory-service"),
            db.url(),
            &vhost.url,
        );
        command
            .env("ADMIN_TOKEN", admin)
            .env("HOLD_EXPIRY_INTERVAL_MS", "20");
        KilledOnDrop(command.spawn().expect("the binary starts"))
    };
    let port = testkit::free_port();
    let mut first = start(port);
    let base = format!("http://127.0.0.1:{port}");
    testkit::wait_until_ok(&format!("{base}/healthz")).await;
    let client = reqwest::Client::new();
    for i in 0..HOLDS {
        let response = client
            .post(format!("{base}/holds"))
            .bearer_auth(admin)
            .json(&hold_body(&format!("h-{i}"), &[(1, 3)], Some(1)))
            .send()
            .await
            .expect("a try");
        assert_eq!(response.status(), 201);
    }
    // Killed while the holds come due and its sweep is at work.
    let due: i64 = loop {
        let due: i64 = db
            .scalar(
                "SELECT count(*) FROM holds WHERE expires_at <= now()",
                "SELECT count(*) FROM holds WHERE expires_at <= CURRENT_TIMESTAMP(6)",
            )
            .await;
        if due > 0 {
            break due;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    assert!(due > 0);

    let other = testkit::free_port();
    let _second = start(other);
    eventually(Duration::from_secs(30), || async {
        let held = db
            .count("SELECT count(*) FROM holds WHERE state <> 'EXPIRED'")
            .await;
        (held == 0).then_some(())
    })
    .await;
    let stock = db
        .count("SELECT stock FROM products WHERE product_id = 1")
        .await;
    let units = db.count("SELECT count(*) FROM held_units").await;
    assert_eq!((stock, units), (10_000, 0), "every unit back exactly once");
}

async fn confirms_and_cancels_sent_at_once_are_each_decided_as_if_alone(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 1_000).await;
    app.create_product(2, 1_000).await;
    for i in 0..60 {
        let items = if i % 2 == 0 {
            vec![(1, 2)]
        } else {
            vec![(1, 1), (2, 3)]
        };
        assert_eq!(
            app.hold(&format!("h-{i:02}"), &items, Some(600))
                .await
                .status(),
            201
        );
    }
    // 0..20 confirmed (10..20 twice), 20..40 cancelled, 40..60 left HELD, and ten cancels of
    // ids never tried: all at once, so they share batches.
    let mut steps: Vec<(String, &str)> = Vec::new();
    steps.extend((0..20).map(|i| (format!("h-{i:02}"), "confirm")));
    steps.extend((10..20).map(|i| (format!("h-{i:02}"), "confirm")));
    steps.extend((20..40).map(|i| (format!("h-{i:02}"), "cancel")));
    steps.extend((0..10).map(|i| (format!("never-{i}"), "cancel")));
    let answers: Vec<_> = steps
        .into_iter()
        .map(|(id, step)| {
            let request = app.admin.post(app.url(&format!("/holds/{id}/{step}")));
            tokio::spawn(async move {
                let response = request.send().await.expect("an end");
                let status = response.status().as_u16();
                let hold: Value = response.json().await.expect("a hold");
                (
                    id,
                    step,
                    status,
                    hold["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    for answer in answers {
        let (id, step, status, state) = answer.await.expect("a task");
        let expected = if step == "confirm" {
            "CONFIRMED"
        } else {
            "CANCELLED"
        };
        assert_eq!((status, state.as_str()), (200, expected), "{step} of {id}");
    }
    let db = &app.database;
    let count = |state: &str| {
        let sql = format!("SELECT count(*) FROM holds WHERE state = '{state}'");
        async move { db.count(&sql).await }
    };
    assert_eq!(
        (
            count("CONFIRMED").await,
            count("CANCELLED").await,
            count("HELD").await
        ),
        (20, 30, 20)
    );
    // Held: 40..60, half (2 of product 1), half (1 of 1 and 3 of 2). Sold: 0..20 likewise.
    assert_eq!(app.stock_and_held(1).await, (1_000 - 30 - 30, 30));
    assert_eq!(app.stock_and_held(2).await, (1_000 - 30 - 30, 30));
    for product in [1, 2] {
        assert_stock_adds_up(&app, product, 1_000).await;
    }
}
