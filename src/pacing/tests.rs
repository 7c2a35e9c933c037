//! The local backend's pacing, on tokio's paused clock.

use super::*;

fn schedules() -> Arc<Schedules> {
    Arc::default()
}

fn origin() -> Origin {
    crate::policy::target::parse_authority("127.0.0.1:1", crate::policy::target::Scheme::Http)
        .expect("origin")
}

impl Pacer {
    /// The convenience form of [`Pacer::pace`]: one group of [`origin`], no in-flight
    /// limit.
    async fn acquire(
        &self,
        schedules: &Schedules,
        group: &str,
        delay: Duration,
        robots_fetched_at: Option<Instant>,
    ) -> Result<Turns, Refused> {
        self.pace(PaceRequest {
            place: Place { schedules },
            address: None,
            group,
            delay,
            rule: DelayRule::CrawlDelay,
            max_in_flight: 0,
            robots_fetched_at,
        })
        .await
    }
}

fn pacer() -> Pacer {
    Pacer::new(PacingConfig {
        max_wait_seconds: crate::config::Seconds::new(10.0),
        max_queue: 3,
        ..PacingConfig::default()
    })
}

#[tokio::test(start_paused = true)]
async fn next_start_waits_for_previous_end_plus_delay() {
    let p = pacer();
    let k = schedules();
    let d = Duration::from_millis(500);
    let start = Instant::now();
    drop(p.acquire(&k, "*", d, None).await.expect("first"));
    let second = p.acquire(&k, "*", d, None).await.expect("second");
    assert_eq!(second.waited, d);
    assert_eq!(start.elapsed(), d);
}

/// Turns given back unused (no exchange started with them) leave the last end as it
/// was: the next request is due when the forgone one was, not a delay later.
#[tokio::test(start_paused = true)]
async fn forgone_turns_leave_the_last_end_as_it_was() {
    let p = pacer();
    let k = schedules();
    let d = Duration::from_millis(500);
    let start = Instant::now();
    drop(p.acquire(&k, "*", d, None).await.expect("first"));
    p.acquire(&k, "*", d, None).await.expect("forgone").forgo();
    assert_eq!(start.elapsed(), d);
    let third = p.acquire(&k, "*", d, None).await.expect("third");
    assert_eq!(third.waited, Duration::ZERO, "due when the forgone one was");
    drop(third);
    let fourth = p.acquire(&k, "*", d, None).await.expect("fourth");
    assert_eq!(fourth.waited, d, "a used turn ends now");
}

/// A schedule with nothing in force is forgotten once no request holds it; one with
/// a delay still running, a backoff, or a holder is kept.
#[tokio::test(start_paused = true)]
async fn idle_schedules_are_forgotten() {
    let p = pacer();
    let k = schedules();
    let held = p.acquire(&k, "a", Duration::ZERO, None).await.expect("a");
    k.forget_idle();
    assert_eq!(k.states().len(), 1, "held: kept");
    drop(held);
    k.forget_idle();
    assert!(k.states().is_empty(), "nothing in force: forgotten");

    let d = Duration::from_millis(500);
    drop(p.acquire(&k, "b", d, None).await.expect("b"));
    k.forget_idle();
    assert_eq!(k.states().len(), 1, "its delay still runs: kept");
    tokio::time::advance(d).await;
    k.forget_idle();
    assert!(k.states().is_empty(), "delay over: forgotten");

    let c = p.acquire(&k, "c", Duration::ZERO, None).await.expect("c");
    c.origin_answered(503, None);
    drop(c);
    k.forget_idle();
    assert_eq!(k.states().len(), 1, "backing off: kept");
}

/// Forgetting an idle schedule keeps the origin's response-time baseline: a response
/// far slower than the ones before still slows the next schedule down.
#[tokio::test(start_paused = true)]
async fn baseline_outlives_a_forgotten_schedule() {
    // One request on the `*` schedule, answered 200 after `took`; then its end.
    async fn answered_after(p: &Pacer, k: &Schedules, took: Duration) {
        let turn = p.acquire(k, "*", Duration::ZERO, None).await.expect("turn");
        tokio::time::advance(took).await;
        turn.origin_answered(200, None);
        drop(turn);
        k.forget_idle();
    }
    let p = pacer();
    let k = schedules();
    for _ in 0..3 {
        answered_after(&p, &k, Duration::from_millis(10)).await;
        assert!(k.states().is_empty(), "nothing in force: forgotten");
    }
    answered_after(&p, &k, Duration::from_millis(200)).await;
    let states = k.states();
    assert_eq!(states.len(), 1, "slowing down: kept");
    assert_eq!(states[0].rule, DelayRule::Adaptive);
    assert!(states[0].delay >= Duration::from_millis(200), "{states:?}");
}

#[tokio::test(start_paused = true)]
async fn no_delay_means_no_serialisation() {
    let p = pacer();
    let k = schedules();
    let a = p.acquire(&k, "*", Duration::ZERO, None).await.expect("a");
    let b = p.acquire(&k, "*", Duration::ZERO, None).await.expect("b");
    assert_eq!((a.waited, b.waited), (Duration::ZERO, Duration::ZERO));
    assert_eq!(p.queued(), 0);
    // A 503 without Retry-After switches pacing on for the schedule.
    a.origin_answered(503, None);
    drop((a, b));
    let start = Instant::now();
    let c = p.acquire(&k, "*", Duration::ZERO, None).await.expect("c");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    drop(c);
}

#[tokio::test(start_paused = true)]
async fn delays_clamp_to_floor_and_ceiling() {
    let p = Pacer::new(PacingConfig {
        floor_seconds: crate::config::Seconds::new(0.2),
        ceiling_seconds: crate::config::Seconds::new(30.0),
        margin_seconds: crate::config::Seconds::new(0.0),
        ..PacingConfig::default()
    });
    let k = schedules();
    assert_eq!(
        p.delay_for(&k, &origin(), "*", None, None).0,
        Duration::from_millis(200)
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(4.5), None).0,
        Duration::from_millis(4500)
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(86_400.0), None).0,
        Duration::from_secs(30)
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(1e20), None).0,
        Duration::from_secs(30)
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(f64::MAX), None).0,
        Duration::from_secs(30)
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(f64::INFINITY), None).0,
        Duration::from_secs(30)
    );
    // The default margin is added to non-zero delays only.
    let p = Pacer::new(PacingConfig::default());
    assert_eq!(
        p.delay_for(&k, &origin(), "*", None, None).0,
        Duration::ZERO
    );
    assert_eq!(
        p.delay_for(&k, &origin(), "*", Some(0.5), None).0,
        Duration::from_millis(505)
    );
}

proptest::proptest! {
    /// For any finite non-negative Crawl-delay d, the delay is min(max(d, floor), ceiling).
    #[test]
    fn delay_is_crawl_delay_clamped(
        d in proptest::prop_oneof![0.0f64..1e3, 0.0f64..f64::MAX, proptest::num::f64::POSITIVE | proptest::num::f64::ZERO],
        floor in 0.0f64..10.0,
        extra in 0.0f64..1e6,
    ) {
        let ceiling = floor + extra;
        let p = Pacer::new(PacingConfig {
            floor_seconds: crate::config::Seconds::new(floor),
            ceiling_seconds: crate::config::Seconds::new(ceiling),
            margin_seconds: crate::config::Seconds::new(0.0),
            ..PacingConfig::default()
        });
        let want = d.max(floor).min(ceiling);
        let got = p.delay_for(&schedules(), &origin(), "*", Some(d), None).0.as_secs_f64();
        proptest::prop_assert!((got - want).abs() <= want * 1e-9 + 1e-9, "d={d} got={got} want={want}");
    }
}

#[tokio::test(start_paused = true)]
async fn queue_and_wait_bounds_refuse_with_retry_after() {
    let p = pacer();
    let k = schedules();
    let d = Duration::from_secs(2);
    let held = p.acquire(&k, "*", d, None).await.expect("first");
    // One in flight: the next would wait one delay after it ends (≥ 2 s).
    let refused = p
        .acquire(&k, "*", Duration::from_secs(20), None)
        .await
        .err()
        .expect("too long");
    assert_eq!(refused.reason, TurnRefusal::WaitTooLong);
    assert_eq!(refused.retry_after, Duration::from_secs(20));
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn pause_from_retry_after_and_backoff() {
    let p = pacer();
    let k = schedules();
    let turn = p
        .acquire(&k, "*", Duration::ZERO, None)
        .await
        .expect("first");
    turn.origin_answered(429, Some(Duration::from_secs(3)));
    drop(turn);
    let start = Instant::now();
    let turn = p
        .acquire(&k, "*", Duration::ZERO, None)
        .await
        .expect("after pause");
    assert!(start.elapsed() >= Duration::from_secs(3) - Duration::from_millis(1));
    turn.origin_answered(503, None);
    drop(turn);
    let start = Instant::now();
    let turn = p
        .acquire(&k, "*", Duration::ZERO, None)
        .await
        .expect("after backoff");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    turn.origin_answered(200, None);
}

#[tokio::test(start_paused = true)]
async fn the_wait_bound_holds_when_backoff_grows_meanwhile() {
    let p = std::sync::Arc::new(Pacer::new(PacingConfig {
        max_wait_seconds: crate::config::Seconds::new(3.0),
        ..PacingConfig::default()
    }));
    let k = schedules();
    let first = p
        .acquire(&k, "*", Duration::from_secs(1), None)
        .await
        .expect("first");
    // Admitted: one delay (1 s) after `first` ends is within the bound.
    let second = tokio::spawn({
        let p = p.clone();
        let k = k.clone();
        async move { p.acquire(&k, "*", Duration::from_secs(1), None).await }
    });
    tokio::task::yield_now().await;
    // The origin then answers 503 three times over: backoff 1 → 2 → 4 → 8 s.
    for _ in 0..4 {
        first.origin_answered(503, None);
    }
    let start = Instant::now();
    drop(first);
    let refused = second.await.expect("task").err().expect("refused");
    assert_eq!(refused.reason, TurnRefusal::WaitTooLong);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "refused at once, not after 8 s"
    );
    assert_eq!(p.queued(), 0);
}
