//! Blind tunnels (`tls.blind_tunnel`, CONNECT or transparent): only what can be judged
//! without a path — egress, `Disallow: /` for the agent, a paced connection start —
//! then bytes both ways. In fleet mode a blind tunnel is routed first, and handed to its
//! origin's owner when another member owns it.

use super::*;
use crate::origin::splice::TunnelEnd;

impl Tunnels {
    /// A blind tunnel: host-level checks, a paced connection start, then bytes both ways.
    /// `destination` is a redirected connection's: the relay goes there, and nothing is
    /// written to the client before it (no `200` for a CONNECT that was never sent, no
    /// HTTP refusal into a TLS handshake: a refused connection is closed, and logged).
    ///
    /// In fleet mode it is routed first: to an origin another member owns, it is handed
    /// over (`handover::tunnel`); one `handed` over by another member is answered
    /// `200` or refused over HTTP whatever its mode, and never handed on. An owner that
    /// gave the key up (released it, handed it on, leaving) refuses before opening
    /// anything: the tunnel is routed once more, as one is whose key this instance gave
    /// up while it queued for its turn.
    pub(super) async fn blind<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut l4: S,
        origin: Origin,
        who: &Requester<'_>,
        started: Instant,
        destination: Option<SocketAddr>,
        handed: Option<&str>,
    ) {
        let shown = origin.to_string();
        let mode = if destination.is_some() && handed.is_none() {
            TunnelMode::TransparentBlind
        } else {
            TunnelMode::Blind
        };
        let root = Target {
            origin,
            path: CanonicalPath::new("/").into_owned(),
        };
        // A request in progress for the drain until the client has its answer (the
        // `200`, or a refusal), not while the tunnel's bytes flow.
        let mut answering = Some(crate::downstream::drain::Serving::start());
        let routed = self.route_blind(
            &mut l4,
            &root,
            who,
            started,
            destination,
            handed,
            mode,
            &mut answering,
        );
        let Some((addr, permit, recorded)) = routed.await else {
            return;
        };
        let outcome = |how: &str| {
            if let Some(seq) = recorded {
                self.enforcer
                    .record_outcome(seq, None, how, (None, None), None);
            }
        };
        // Asked again right before the connection opens (its start is what the origin
        // sees): a process stopped between its turn and here must not open it once it
        // no longer acts for the origin (see `Turn::still_acting`).
        if !permit.still_acting() {
            permit.forgo();
            outcome("not-acting");
            let why = "this instance stopped acting for the origin before the tunnel opened";
            let answer = crate::enforce::Refusal::FleetUnavailable { why }.answer();
            return self.refuse(&mut l4, &shown, mode, &answer, started).await;
        }
        let upstream = tokio::time::timeout(
            self.policy.connect_timeout,
            crate::origin::loops::connect(addr, self.policy.mark),
        )
        .await;
        // The schedule counts connection starts: the next may begin a delay after this one
        // (what a blind tunnel carries is not seen, so its exchanges cannot be followed).
        permit.end(ExchangeEnd::Complete);
        let mut upstream = match upstream {
            Ok(Ok(upstream)) => upstream,
            Ok(Err(e)) => {
                outcome("connect-failed");
                let answer = upstream_unreachable(&shown, &e.to_string());
                return self.refuse(&mut l4, &shown, mode, &answer, started).await;
            }
            Err(_) => {
                outcome("connect-timed-out");
                let answer = upstream_unreachable(&shown, "connect timed out");
                return self.refuse(&mut l4, &shown, mode, &answer, started).await;
            }
        };
        outcome("established");
        if mode == TunnelMode::Blind && !established(&mut l4).await {
            return;
        }
        drop(answering);
        metrics::record_tunnel(mode, metrics::TunnelOutcome::Established);
        log_tunnel(&shown, mode, "tunnelled", started);
        let idle = self.handover.tunnel_idle();
        if crate::origin::splice::both_ways(&mut l4, &mut upstream, idle).await == TunnelEnd::Idle {
            log::info!("tunnel to {shown} closed: it carried nothing for {idle:?} (limits.tunnel_idle_seconds)");
        }
    }

    /// Where a blind tunnel goes: decided (refused, paced here, or handed to its owner
    /// and relayed, routed once more when that owner gave its key up). `Some`: the address
    /// and the turn of a connection this instance opens, and its decision's place in
    /// the evidence (written before; a tunnel whose record cannot be written is
    /// refused); `None`: answered, handed over or refused. `answering`: the drain's count
    /// of it, let go once a tunnel handed over has its owner's `200`.
    #[allow(clippy::too_many_arguments)]
    async fn route_blind<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        l4: &mut S,
        root: &Target,
        who: &Requester<'_>,
        started: Instant,
        destination: Option<SocketAddr>,
        handed: Option<&str>,
        mode: TunnelMode,
        answering: &mut Option<crate::downstream::drain::Serving>,
    ) -> Option<(SocketAddr, Turn, Option<u64>)> {
        let shown = root.origin.to_string();
        let mut reroutes = Reroutes::default();
        let arrival = Said {
            arrived: mode.label(),
            from: handed,
            ..Said::default()
        };
        loop {
            let (decision, snapshot) = self
                .enforcer
                .decide_tunnel(root, who, destination, handed)
                .await;
            let snapshot = snapshot.as_deref();
            let answer = match decision {
                Decision::Refuse(reply) => reply.answer(),
                Decision::Forward {
                    addr,
                    pace,
                    why,
                    reported,
                    ..
                } => match self.enforcer.pace(&pace).await {
                    Ok(permit) => {
                        let reported = reported.map(|r| r.reported());
                        let allowed = why.to_string();
                        let said =
                            Said::forwarded(why, &allowed, reported.as_ref()).arriving(arrival);
                        let said = Said {
                            wait: Some(permit.waited()),
                            ..said
                        };
                        match self
                            .enforcer
                            .record_forward(root, who, snapshot, said)
                            .await
                        {
                            Ok(seq) => return Some((addr, permit, seq)),
                            Err(answer) => {
                                permit.forgo();
                                self.refuse(l4, &shown, mode, &answer, started).await;
                                return None;
                            }
                        }
                    }
                    // Given up here while it queued (see `RobotsGateProxy::act_on`):
                    // routed once more.
                    Err(Unpaced::GaveUp(_))
                        if handed.is_none() && self.handover.route_again(None, &mut reroutes) =>
                    {
                        continue
                    }
                    Err(unpaced) => unpaced.answer(),
                },
                Decision::HandOver(owner) => {
                    let to = (&owner, destination, mode);
                    if self
                        .hand_blind(l4, root, who, to, answering, &mut reroutes, started)
                        .await
                    {
                        continue;
                    }
                    return None;
                }
            };
            let said = Said::answered(&answer).arriving(arrival);
            self.enforcer.record_refusal(root, who, snapshot, said);
            self.refuse(l4, &shown, mode, &answer, started).await;
            return None;
        }
    }

    /// Hands a blind tunnel to `owner` (on its way to `destination`, arrived as `mode`)
    /// and relays it: `true` when it is to be routed once more (the owner gave the key
    /// up before opening anything, or never received it, and `reroutes` allows it);
    /// `false` once it is relayed or answered.
    #[allow(clippy::too_many_arguments)]
    async fn hand_blind<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        l4: &mut S,
        root: &Target,
        who: &Requester<'_>,
        (owner, destination, mode): (&crate::fleet::Owner, Option<SocketAddr>, TunnelMode),
        answering: &mut Option<crate::downstream::drain::Serving>,
        reroutes: &mut Reroutes,
        started: Instant,
    ) -> bool {
        let shown = root.origin.to_string();
        let connect = mode != TunnelMode::TransparentBlind;
        let context = PeerContext {
            client: who.client,
            user: who.user.map(str::to_string),
            tunnel: None,
            destination,
            http2: false,
        };
        let chose = (context, who.user_agent);
        let relayed = self
            .handover
            .tunnel(l4, owner, &root.origin, chose, connect, answering)
            .await;
        let answer = match relayed {
            Err(answer) => answer,
            Ok(Tunnelled::Done) => {
                log_tunnel(&shown, mode, "handed_over", started);
                return false;
            }
            // The owner gave the key up before opening anything, or never received the
            // tunnel: routed once more, like a request, while that is allowed.
            Ok(last) => {
                if self.handover.route_again(Some(owner), reroutes) {
                    return true;
                }
                unavailable(match last {
                    Tunnelled::GaveUp => Unreached::KeptGivingUp,
                    _ => Unreached::Unreachable,
                })
            }
        };
        self.refuse(l4, &shown, mode, &answer, started).await;
        false
    }
}
