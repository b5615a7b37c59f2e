//! The state of the whole system, the actions that move it, and the
//! properties every reachable state must keep.

use stateright::{Model, Property, Representative};

use protocol::failover;
use protocol::placement::{self, Placed};
use protocol::press::{self, Heard, NodeNow};

pub const NODES: usize = 2;
pub const REPLICAS: usize = 2;

/// The fixes of the protocol; each one a guard the checker shows is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guards {
    /// A press its node took and did not answer in time answers 504 (its
    /// outcome is unknown), never 503 (hole 3).
    pub unknown_is_504: bool,
    /// A press is sent to another node only when it provably was not
    /// counted (never sent, or refused); one that reached a node that then
    /// failed answers 504 (hole 6).
    pub retry_only_unsent: bool,
    /// A replica that finds its timer and the node's answer both ready
    /// takes the answer (hole 2).
    pub answer_before_timer: bool,
    /// A placement carries the archive's version its base was folded at,
    /// and Redis refuses one older than the session's last unmap (hole 4).
    pub base_guard: bool,
    /// A Redis (or a cluster primary) that comes back on an older snapshot
    /// is recognised (each group keeps the identity of the server that
    /// holds it) and nothing is read from it until the registry is rebuilt
    /// (hole 1).
    pub identity_check: bool,
    /// A press sent before its replica's lease lapsed is answered 504 when
    /// its answer comes: a fence of its node may have gone by without the
    /// replica, and the session moved on (a failover while it was paused).
    pub lease_voids_answers: bool,
    /// A silent replica's own threshold passes before the others': it stops
    /// trusting itself (its lease lapses) before any other replica goes on
    /// without its acknowledgement (`protocol::silence`: both derive from
    /// `LEASE_MS`, the others' with a margin). Out, the others may give up
    /// first, as 0.2.0's one-second wait did before the two-second lapse.
    pub silence_order: bool,
    /// A clean's unmap takes only the placements it was made for: an
    /// expiry's, those that ended by the time the clean began (a session
    /// placed anew on the same node ends later); a removal's or a
    /// failover's, every one (the node is closed to new sessions). Out, a
    /// script that runs again unmaps the session placed anew meanwhile.
    pub unmap_takes_its_own: bool,
    /// Mechanisms, each taken out to show it is needed (issue 45).
    /// The gate: a fence's acknowledgement waits for this replica's
    /// presses in flight to the node, and presses wait while it is closed.
    pub gate: bool,
    /// A clean waits for every live replica's acknowledgement of its fence.
    pub fence_acks: bool,
    /// The clean mark: a press whose node was cleaned since its mapping
    /// was read reads the mapping again before it is sent.
    pub clean_mark: bool,
    /// The fencing node refuses a press stamped with an epoch older than
    /// its last clean.
    pub fencing_epoch: bool,
    /// Clean tokens: an archive row written under a revoked token does not
    /// count.
    pub clean_tokens: bool,
    /// The clean's journal: a cleaner that dies after sending `/clean`
    /// leaves its journal, and its fence stays until another replica's
    /// sweep finishes the clean (the same token, settled or failed).
    /// Out, the fence runs stale and comes down over an unsettled clean.
    pub journal: bool,
    /// Issue 46: each replica remembers the highest total it showed of the
    /// session's present placement and hands it over with its
    /// acknowledgement of a failover's fence; the failover archives the
    /// highest on the node's behalf, under a token of its own, before it
    /// unmaps. Out, a node's death loses every click since its archive.
    pub hand_over: bool,
    /// A down node that answers its health checks again (alive all along,
    /// or restarted at once) is failed over before it is wiped
    /// (`NodeCleaner::wipe`): its sessions leave only through the
    /// failover, with what the replicas showed. Out, the wipe unmaps them
    /// from their last archive.
    pub recovery_fails_over: bool,
    /// A node without clean tokens that was declared down because its
    /// `/clean` timed out is not recovered by health checks: that clean may
    /// still reach it after it serves again and forget what it counted
    /// since. It stays down until an admin adds it again. (A node with
    /// clean tokens refuses a clean older than its last one: it recovers
    /// by itself.)
    pub clean_timeout_keeps_down: bool,
    /// Issue 54: a clean whose timer fires fails its node over as a
    /// failover does: the replicas acknowledge a failover's fence, handing
    /// over what they showed, and the failover archives it before it
    /// unmaps. Out, the clean's timer unmaps the node's sessions from their
    /// last archive, and a node that dies during a clean of it loses what
    /// its users saw.
    pub clean_timer_hands_over: bool,
    /// Issue 54: a session's row the hand-over wrote for a node without
    /// clean tokens takes no write of a node without tokens until a clean
    /// of the node the session is on opens it: the failed node's late
    /// `/clean` archive (the same clicks the hand-over archived) is not
    /// added to them (`late_rows.sql`). Out, the late row and the
    /// hand-over's are summed at the next fold.
    pub late_rows_refused: bool,
}

impl Guards {
    /// Every fix in.
    pub const ALL: Guards = Guards {
        unknown_is_504: true,
        retry_only_unsent: true,
        answer_before_timer: true,
        base_guard: true,
        identity_check: true,
        lease_voids_answers: true,
        silence_order: true,
        unmap_takes_its_own: true,
        gate: true,
        fence_acks: true,
        clean_mark: true,
        fencing_epoch: true,
        clean_tokens: true,
        journal: true,
        hand_over: true,
        recovery_fails_over: true,
        clean_timeout_keeps_down: true,
        clean_timer_hands_over: true,
        late_rows_refused: true,
    };

    /// Every guard's name, as [`Guards::without`] takes it.
    pub const NAMES: [&'static str; 19] = [
        "unknown_is_504",
        "retry_only_unsent",
        "answer_before_timer",
        "base_guard",
        "identity_check",
        "lease_voids_answers",
        "silence_order",
        "unmap_takes_its_own",
        "gate",
        "fence_acks",
        "clean_mark",
        "fencing_epoch",
        "clean_tokens",
        "journal",
        "hand_over",
        "recovery_fails_over",
        "clean_timeout_keeps_down",
        "clean_timer_hands_over",
        "late_rows_refused",
    ];

    /// These guards with the one named taken out (`None`: no such guard).
    pub fn without(self, name: &str) -> Option<Guards> {
        let mut g = self;
        let guard = match name {
            "unknown_is_504" => &mut g.unknown_is_504,
            "retry_only_unsent" => &mut g.retry_only_unsent,
            "answer_before_timer" => &mut g.answer_before_timer,
            "base_guard" => &mut g.base_guard,
            "identity_check" => &mut g.identity_check,
            "lease_voids_answers" => &mut g.lease_voids_answers,
            "silence_order" => &mut g.silence_order,
            "unmap_takes_its_own" => &mut g.unmap_takes_its_own,
            "gate" => &mut g.gate,
            "fence_acks" => &mut g.fence_acks,
            "clean_mark" => &mut g.clean_mark,
            "fencing_epoch" => &mut g.fencing_epoch,
            "clean_tokens" => &mut g.clean_tokens,
            "journal" => &mut g.journal,
            "hand_over" => &mut g.hand_over,
            "recovery_fails_over" => &mut g.recovery_fails_over,
            "clean_timeout_keeps_down" => &mut g.clean_timeout_keeps_down,
            "clean_timer_hands_over" => &mut g.clean_timer_hands_over,
            "late_rows_refused" => &mut g.late_rows_refused,
            _ => return None,
        };
        *guard = false;
        Some(g)
    }

    /// The protocol as the code had it at 0.1.0.
    pub const NONE: Guards = Guards {
        unknown_is_504: false,
        retry_only_unsent: false,
        answer_before_timer: false,
        base_guard: false,
        identity_check: false,
        lease_voids_answers: false,
        silence_order: false,
        unmap_takes_its_own: false,
        gate: true,
        fence_acks: true,
        clean_mark: true,
        fencing_epoch: true,
        clean_tokens: true,
        journal: true,
        hand_over: false,
        recovery_fails_over: false,
        clean_timeout_keeps_down: false,
        clean_timer_hands_over: false,
        late_rows_refused: false,
    };
}

/// The system: its bounds and which guards it runs with.
#[derive(Debug, Clone)]
pub struct Protocol {
    pub guards: Guards,
    /// How many presses the client makes in all.
    pub presses: u8,
    /// How many of them may be under way at once (a user who clicks again
    /// before the last click was answered, or who gave up on it).
    pub outstanding: u8,
    /// How many cleans (expiry or removal, with archive) may start.
    pub cleans: u8,
    /// How many times a node may restart, losing its counts (and the
    /// fencing node its floor).
    pub restarts: u8,
    /// How many times Redis may come back on its last snapshot, or empty.
    pub rollbacks: u8,
    /// How many replicas may be killed (their presses' clients see the
    /// connection reset; they may be started again) or fall silent for
    /// long (paused, or cut off from Redis: their lease lapses and the
    /// cleaners stop waiting for them; they resume later).
    pub crashes: u8,
    pub lapses: u8,
    /// How many presses `REQUEST_TIMEOUT_MS` may drop while they wait at
    /// their node (answered 504 `request_timeout`, their gate released).
    pub deadlines: u8,
    /// How many times a clean's last script (its unmap, or its re-base)
    /// may run a second time later: on a Redis Cluster, a script whose
    /// reply was lost with its connection is sent again, and the first
    /// run may have landed.
    pub replays: u8,
    /// How many times a cleaner may die after sending `/clean`.
    pub cleaner_deaths: u8,
    /// How many times a node marked down may answer its health checks
    /// again and be recovered (wiped and brought back up). A `/clean`
    /// whose timer fired may still be on the wire then, and reach the node
    /// after it serves again.
    pub recoveries: u8,
    /// How many nodes fence (from node 0): they refuse a press older than
    /// their last clean, and their archive rows carry the clean's token.
    /// The rest speak the task's API only. 1 by default.
    pub fencing: u8,
}

impl Protocol {
    fn fences(&self, node: usize) -> bool {
        node < self.fencing as usize
    }

    /// Whether the node stamps and honours clean tokens: the fencing ones,
    /// while the guard is in.
    fn takes_tokens(&self, node: usize) -> bool {
        self.guards.clean_tokens && self.fences(node)
    }
}

/// A clean's script that may run again later (`Action::ScriptRunsAgain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replay {
    /// `unmap.lua` taking the session off `node` (a clean's, or a
    /// failover's).
    Unmap { node: u8 },
    /// `unmap.lua`'s re-based pair: the session stays on `node` at `total`.
    Rebase { node: u8, total: u8 },
}

/// What Redis holds of the session and the nodes' fencing epochs: what an
/// older snapshot brings back. (Whether a node is down comes back from
/// Postgres, which the rebuild trusts; fences are not in a snapshot taken
/// or restored while a clean runs: not modelled.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Snapshot {
    pub mapping: Option<(u8, u8)>,
    pub life: u8,
    pub epoch: [u8; NODES],
    pub unmapped_at: u8,
}

impl Snapshot {
    /// What a Redis restarted empty holds.
    const EMPTY: Snapshot = Snapshot {
        mapping: None,
        life: 0,
        epoch: [0; NODES],
        unmapped_at: 0,
    };
}

/// What of Redis comes back on a snapshot: a single Redis, or on a Redis
/// Cluster one primary, the session group's (its mapping and unmap mark)
/// or the control slot's (the nodes' fencing epochs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Whole,
    Sessions,
    Control,
}

/// What the client was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer {
    /// 200: counted; the clicks shown.
    Counted(u8),
    /// 503: nothing was counted.
    NotCounted,
    /// 504: the node took the press and its outcome is unknown.
    Unknown,
}

/// One press of the client, and what the checker knows of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Press {
    pub answer: Option<Answer>,
    /// How many times a node counted it.
    pub counted: u8,
    /// How many times the session had lost clicks when it was counted (a
    /// failover of its node, or a restart of a node holding its clicks):
    /// what a node counted since its last archive is lost then.
    pub era: u8,
}

/// Where a replica is in serving one press (`SessionService::press`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// About to read the session's mapping.
    Lookup,
    /// No mapping: about to fold the archive for the base.
    Fold,
    /// Folded `base` at archive `version`: about to place. `mark`: the
    /// replica's clean mark read before the fold.
    Place { base: u8, version: u8, mark: u8 },
    /// Mapped to `node`, with `base` and the node's fencing `epoch` as
    /// read, after the clean mark `mark`; `life`: which placement of the
    /// session the mapping is (the code tells them apart by their ends).
    Send {
        node: u8,
        base: u8,
        epoch: u8,
        mark: u8,
        life: u8,
    },
    /// Sent; waiting for the node's answer or the timer.
    /// `lapses`: the replica's lease lapses when it was sent (`u8::MAX`:
    /// sent while lapsed); the rest as in `Send`, which a press whose
    /// connect timed out at a spared node goes back to.
    Waiting {
        node: u8,
        base: u8,
        lapses: u8,
        epoch: u8,
        mark: u8,
        life: u8,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Work {
    pub press: u8,
    pub step: Step,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replica {
    /// Presses being served, sorted (so equal states hash equal).
    pub work: Vec<Work>,
    /// Presses holding each node's gate (no clean of it starts meanwhile).
    pub in_gate: [u8; NODES],
    /// Gates this replica closed for a fence.
    pub gate_closed: [bool; NODES],
    /// The clean mark (`NodeTable::clean_mark`): bumped whenever a gate
    /// this replica closed for a clean opens again...
    pub mark: u8,
    /// ...and the mark at which each node's gate last opened: a press that
    /// read its mapping before reads it again (`cleaned_since`).
    pub cleaned_at: [u8; NODES],
    /// How often its lease lapsed (`Lease::contact`, its gaps).
    pub lapses: u8,
    /// The highest total it answered of the session's placement on a
    /// node: (node, life, total), beside the cached mapping.
    pub shown: Option<(u8, u8, u8)>,
}

/// A message between a replica (or the cleaner) and a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// `POST /press`, with the fencing epoch for a node that fences.
    Press {
        press: u8,
        replica: u8,
        node: u8,
        epoch: u8,
    },
    /// The node's answer to a press: its count, or `None` for a refusal.
    Reply {
        press: u8,
        replica: u8,
        node: u8,
        count: Option<u8>,
    },
    /// `POST /clean`: archive (or only forget) under `token`.
    Clean { node: u8, token: u8, archive: bool },
    /// The node's answer to a clean.
    Cleaned { node: u8, token: u8 },
}

/// A clean's token in Postgres (`archive::tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Token {
    Issued,
    /// Settled: what the node archived with it counts.
    Completed,
    /// What the node may yet archive with it never counts.
    Revoked,
}

/// The cleaner: one operation at a time (the node lock), on any replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cleaner {
    Idle,
    /// Fence raised on `node`; waiting for every replica's gate.
    Fenced {
        node: u8,
        archive: bool,
    },
    /// `/clean` sent with `token`; waiting for the node or the timer.
    Sent {
        node: u8,
        token: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    // Redis.
    /// The session's mapping: node, base, and the archive version its base
    /// was folded at.
    pub mapping: Option<(u8, u8)>,
    /// Which placement of the session the mapping is, and how many there
    /// were (placements end at different moments: never rolled back).
    pub life: u8,
    pub lives: u8,
    /// The highest total handed over with the acknowledgements of the
    /// failover's fence up now.
    pub handed: Option<u8>,
    pub down: [bool; NODES],
    /// Declared down by its clean's timer while taking no clean tokens:
    /// not recovered by health checks (`clean_timeout_keeps_down`).
    pub held_down: [bool; NODES],
    /// The fencing epoch recorded for each node (its last clean's token).
    pub epoch: [u8; NODES],
    pub fence: [bool; NODES],
    /// The archive's version when the session was last unmapped.
    pub unmapped_at: u8,
    /// Redis's last snapshot (an RDB), and how often it came back on one.
    pub snapshot: Option<Snapshot>,
    pub rollbacks: u8,
    /// The registry is being rebuilt: nothing is read or placed, and these
    /// nodes are still to be cleaned (archived under a fresh token).
    pub rebuilding: bool,
    pub to_rebuild: [bool; NODES],
    // Postgres.
    /// Archive rows of the session: (token, clicks); token 0: a node that
    /// stamps none (they always count).
    pub rows: Vec<(u8, u8)>,
    /// Token states, by token number - 1.
    pub tokens: Vec<Token>,
    /// The session's row was written by a hand-over for a node without
    /// clean tokens: a write of such a node is refused until a clean of
    /// the node the session is on opens it (`late_rows_refused`).
    pub closed: bool,
    /// Bumped by every settled clean.
    pub version: u8,
    // Nodes.
    pub count: [u8; NODES],
    /// The epoch of the press that started a node's count, at the nodes
    /// that take clean tokens (0 while it has none).
    pub since: [u8; NODES],
    /// The fencing nodes' floors: presses with an older epoch are refused.
    pub floor: [u8; NODES],
    // The network, sorted.
    pub net: Vec<Msg>,
    pub replicas: [Replica; REPLICAS],
    /// Replicas that acknowledged the current fence.
    pub acked: [bool; REPLICAS],
    pub cleaner: Cleaner,
    pub cleans: u8,
    /// Replicas killed (until started again); replicas silent past their
    /// own lease (`lapsed`: they void what they read and cached) and past
    /// the cleaners' wait (`given_up`: fences go on without them), until
    /// their next heartbeat.
    pub dead: [bool; REPLICAS],
    pub lapsed: [bool; REPLICAS],
    pub given_up: [bool; REPLICAS],
    pub crashes: u8,
    pub lapses: u8,
    pub deadlines: u8,
    pub cleaner_deaths: u8,
    pub recoveries: u8,
    /// The clean script that may yet run again, and how many did.
    pub replay: Option<Replay>,
    pub replays: u8,
    // The client, and what the checker knows.
    pub presses: Vec<Press>,
    /// Clicks counted by nodes (the client's presses that counted).
    pub truth: u8,
    /// A node was marked down while an answer of its (to a press, or to
    /// the clean) waited to be read by the replica that marked it down:
    /// judged from the network whenever a node is marked down.
    pub taken_down_answering: bool,
    /// A 200 answer was above the truth when it was given (judged then: a
    /// node's restart later loses clicks an earlier answer rightly showed).
    pub answered_above_truth: bool,
    /// Times the session lost clicks (its era): a placement on a base below
    /// an answer shown in the era (a failover that could not hand them
    /// over, Redis forgetting), a restart of a node holding clicks of it
    /// since its last archive. A restart of a node that held none excuses
    /// nothing. `shown_top`: the highest answer of the era.
    pub losses: u8,
    pub restarts: u8,
    /// The highest total each replica answered of the present placement,
    /// whether a replica that answered one died since (its memory went
    /// with it), and whether a failover lost a click shown though every
    /// replica that showed one handed it over.
    pub life_shown: [u8; REPLICAS],
    pub shown_top: u8,
    pub forgot_shown: bool,
    pub lost_shown: bool,
}

/// The two replicas are alike: every action one may take the other may
/// too, and every property judges them alike. So a state and the same with
/// the replicas swapped are one for the checker, which visits one of the
/// two (the smaller by what each replica holds): about half the states.
impl Representative for State {
    fn representative(&self) -> Self {
        let swapped = self.with_replicas_swapped();
        let key = |s: &State| {
            (
                s.replicas.clone(),
                s.acked,
                s.dead,
                s.lapsed,
                s.given_up,
                s.life_shown,
                s.net.clone(),
            )
        };
        if key(&swapped) < key(self) {
            swapped
        } else {
            self.clone()
        }
    }
}

impl State {
    /// Every field that names a replica, by its place or in a message.
    fn with_replicas_swapped(&self) -> State {
        const _: () = assert!(REPLICAS == 2, "a swap is every permutation of two");
        let mut s = self.clone();
        s.replicas.swap(0, 1);
        s.acked.swap(0, 1);
        s.dead.swap(0, 1);
        s.lapsed.swap(0, 1);
        s.given_up.swap(0, 1);
        s.life_shown.swap(0, 1);
        for msg in &mut s.net {
            if let Msg::Press { replica, .. } | Msg::Reply { replica, .. } = msg {
                *replica = 1 - *replica;
            }
        }
        s.net.sort();
        s
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client presses through `replica`.
    ClientPress { replica: u8 },
    /// `Sessions::lookup` (one `HGET`).
    Lookup { replica: u8, press: u8 },
    /// `Archive::fold_one`: the session's archived clicks.
    FoldOne { replica: u8, press: u8 },
    /// `place.lua`, choosing `node` for a new session.
    Place { replica: u8, press: u8, node: u8 },
    /// `NodeClient::press`: through the gate, onto the wire.
    SendPress { replica: u8, press: u8 },
    /// The node's answer read (`attempt`: `Served` or `Refused`).
    ReadAnswer { replica: u8, press: u8 },
    /// The press's timer fired; `failed`: the node is judged failed (marked
    /// down), else spared (alive but slow). `sent`: the request may have
    /// reached the node; else its connect timed out (it is taken off the
    /// wire).
    Timer {
        replica: u8,
        press: u8,
        failed: bool,
        sent: bool,
    },
    /// A node takes a message off the wire (`POST /press`, `POST /clean`).
    NodeReceives { msg: Msg },
    /// `raise_fence.lua` on `node`: a clean (with archive) of an up node, or
    /// the failover of a down one.
    RaiseFence { node: u8 },
    /// `FenceWatcher`: the replica's gate to the node closes (no press of
    /// its own holds it) and it acknowledges.
    AckFence { replica: u8 },
    /// `NodeCleaner::clean`: every replica acknowledged; the token issued
    /// and `/clean` sent (archive), or the failover's unmap and revoke.
    CleanNode,
    /// The node answered the clean: fold, unmap, record the epoch, lower.
    /// `rebase`: the session was live and the node forgot everything: it
    /// stays on the node, re-based on its folded total (`unmap.lua`'s
    /// re-based pairs), and its group counts no unmap.
    Settle { rebase: bool },
    /// The clean's timer: the node is declared down, its token revoked,
    /// its sessions moved off (`clean_failed`).
    CleanTimer,
    /// A node restarts (kill -9 and start): its counts are gone, and the
    /// fencing node's floor with them.
    NodeRestarts { node: u8 },
    /// `NodeRegistry::recover`: a node marked down answers its health
    /// checks again. Its wipe's fence waits for every live replica's gate;
    /// then its counts are forgotten (`/clean archive=false` under a token
    /// of its own, which fences out older ones) and it is up again, a
    /// clean of it recorded by every replica that honoured the fence.
    NodeRecovers { node: u8 },
    /// A replica is killed (kill -9): its presses end unanswered (their
    /// clients see the connection reset), its gates go with it; what it
    /// sent is still on the wire. The fence stops waiting for it.
    ReplicaDies { replica: u8 },
    /// A silent replica's own lease runs out (`Lease::lapsed_at`): what it
    /// reads from a node after this is shown only if the registry still
    /// has the node up under the same epoch, and its cache is void.
    LeaseLapses { replica: u8 },
    /// The cleaners' wait for a silent replica runs out
    /// (`protocol::silence`: its heartbeat is older than the lease and
    /// the margin): fences go on without its acknowledgement.
    WaitRunsOut { replica: u8 },
    /// The replica resumes and beats again (`heartbeat`): fences wait for
    /// it again, and a lapsed one voids every mapping it read before.
    Heartbeat { replica: u8 },
    /// `REQUEST_TIMEOUT_MS` drops a press waiting at its node: 504
    /// `request_timeout`, its gate released, nobody reads the answer.
    RequestTimeout { replica: u8, press: u8 },
    /// A killed replica is started again: nothing cached, no press under
    /// way; its first `poll_once` closes its gates for the fences up and
    /// fences wait for it again.
    ReplicaStarts { replica: u8 },
    /// A clean's last script runs a second time (`State::replay`).
    ScriptRunsAgain,
    /// The replica running a clean dies after sending `/clean`: its
    /// journal lets another replica's sweep finish the clean
    /// (`finish_stale`), as the cleaner would have.
    CleanerDies,
    /// Redis writes a snapshot (`BGSAVE`, or its `save` rules).
    RedisSaves,
    /// Redis restarts empty (no persistence, or its files lost): as a
    /// rollback to a snapshot of nothing.
    RedisRestartsEmpty,
    /// Redis comes back on its snapshot (restarted from its RDB, or a
    /// failover to a replica that lagged): all of it, or on a Redis
    /// Cluster one primary; the rebuild follows (`State::come_back_on`).
    RedisRollsBack { part: Part },
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

impl State {
    fn work(&self, replica: u8, press: u8) -> Option<Step> {
        self.replicas[replica as usize]
            .work
            .iter()
            .find(|w| w.press == press)
            .map(|w| w.step)
    }

    fn set_step(&mut self, replica: u8, press: u8, step: Option<Step>) {
        let work = &mut self.replicas[replica as usize].work;
        work.retain(|w| w.press != press);
        if let Some(step) = step {
            work.push(Work { press, step });
        }
        work.sort();
    }

    fn answer(&mut self, replica: u8, press: u8, answer: Answer) {
        self.presses[press as usize].answer = Some(answer);
        self.set_step(replica, press, None);
    }

    /// What the press does after `protocol::press::next`.
    fn go_on(&mut self, replica: u8, press: u8, next: press::Next<u8>) {
        match next {
            press::Next::Answer(clicks) => {
                self.answered_above_truth |= clicks > self.truth;
                if self.presses[press as usize].era == self.losses {
                    self.shown_top = self.shown_top.max(clicks);
                }
                self.answer(replica, press, Answer::Counted(clicks))
            }
            press::Next::Unknown => self.answer(replica, press, Answer::Unknown),
            // Failed over first: the node is down, the cleaner's fence
            // of it follows (`RaiseFence`); a requeue stays in `Timer`.
            press::Next::Again(_) => self.set_step(replica, press, Some(Step::Lookup)),
        }
    }

    fn send(&mut self, msg: Msg) {
        self.net.push(msg);
        self.net.sort();
    }

    fn reply_for(&self, replica: u8, press: u8) -> Option<Msg> {
        self.net.iter().copied().find(
            |m| matches!(m, Msg::Reply { press: p, replica: r, .. } if *p == press && *r == replica),
        )
    }

    /// A press's answer left unread: its connection is dropped.
    fn drop_reply(&mut self, replica: u8, press: u8) {
        if let Some(reply) = self.reply_for(replica, press) {
            self.net.retain(|m| *m != reply);
        }
    }

    /// Whether an answer of `node` to a press of `replica` waits to be
    /// read: a replica that runs reads it before any timer of its own at
    /// the node fires (`answer_before_timer`).
    fn answer_waiting(&self, replica: u8, node: u8) -> bool {
        self.net.iter().any(
            |m| matches!(m, Msg::Reply { replica: r, node: n, .. } if *r == replica && *n == node),
        )
    }

    /// What the archive holds for the session: rows whose token was
    /// settled, and those of a node that stamps none (every row, without
    /// `clean_tokens`).
    fn archived(&self, clean_tokens: bool) -> u8 {
        self.rows
            .iter()
            .filter(|(token, _)| {
                !clean_tokens || *token == 0 || self.tokens[*token as usize - 1] == Token::Completed
            })
            .map(|(_, clicks)| clicks)
            .sum()
    }

    fn outstanding(&self) -> u8 {
        self.presses.iter().filter(|p| p.answer.is_none()).count() as u8
    }

    /// Marks `node` down (`mark_down_unless_last` is not modelled: with one
    /// session the last node going down only answers its presses 503), by
    /// `replica`'s timer or (`None`) the clean's: judged from the network,
    /// whether an answer of the node waited for it then.
    fn mark_down(&mut self, node: u8, by: Option<u8>) {
        let answering = match by {
            Some(replica) => self.answer_waiting(replica, node),
            None => self
                .net
                .iter()
                .any(|m| matches!(m, Msg::Cleaned { node: n, .. } if *n == node)),
        };
        self.taken_down_answering |= answering;
        self.down[node as usize] = true;
    }

    /// Unmaps the session if it is on `node`: it continues from its
    /// archive.
    fn unmap_if_on(&mut self, node: u8) {
        let unmapped;
        (self.mapping, unmapped) = placement::unmap(self.mapping, node);
        if unmapped {
            self.unmapped_at = self.version;
        }
    }

    /// A clean's last script ran; within the bounds, it may run again
    /// later (replacing one that has not yet).
    fn may_replay(&mut self, replay: Replay, bound: u8) {
        if self.replays < bound {
            self.replays += 1;
            self.replay = Some(replay);
        }
    }

    /// The failover's unmap: what the node counted since its last archive
    /// is lost (mapped there, or not any more: after a rebuild's wipe). A
    /// click shown of the session's placement here and above what the
    /// archive now holds is lost though every replica that showed one was
    /// heard (acknowledged the fence), unless one of them died meanwhile.
    fn fail_over(&mut self, node: u8, clean_tokens: bool) {
        if matches!(self.mapping, Some((n, _)) if n == node) {
            let shown = self.life_shown.iter().copied().max().unwrap_or(0);
            let heard_all = (0..REPLICAS).all(|r| self.life_shown[r] == 0 || self.acked[r]);
            self.lost_shown |=
                shown > self.archived(clean_tokens) && heard_all && !self.forgot_shown;
        }
        self.unmap_if_on(node);
    }

    /// A 200 answer of `total` for the placement `life` on `node`: the
    /// replica remembers the highest of the newest placement it answered.
    fn remember(&mut self, replica: u8, node: u8, life: u8, total: u8) {
        let r = replica as usize;
        let shown = &mut self.replicas[r].shown;
        match *shown {
            Some((_, l, t)) if l > life || (l == life && t >= total) => {}
            _ => *shown = Some((node, life, total)),
        }
        if life == self.life {
            self.life_shown[r] = self.life_shown[r].max(total);
        }
    }

    /// `lower_fence.lua`; each replica's gate opens, and its clean mark
    /// records that the node was cleaned (`NodeTable::cleaned`).
    fn lower_fence(&mut self, node: u8) {
        self.fence[node as usize] = false;
        for replica in &mut self.replicas {
            if replica.gate_closed[node as usize] {
                replica.gate_closed[node as usize] = false;
                replica.mark += 1;
                replica.cleaned_at[node as usize] = replica.mark;
            }
        }
        self.acked = [false; REPLICAS];
        self.handed = None;
        self.cleaner = Cleaner::Idle;
        if self.rebuilding && !self.to_rebuild.contains(&true) {
            // `declare_complete`: a new group epoch, so a base folded
            // before the rebuild is refused (base_guard).
            self.rebuilding = false;
            self.unmapped_at = self.version;
        }
    }

    /// Every fence up now is honoured: the replica's gate closes (new
    /// presses wait; those in flight go on), and every mapping it read
    /// before is read again (`poll_once`).
    fn honour_fences(&mut self, replica: u8) {
        let fence = self.fence;
        let r = &mut self.replicas[replica as usize];
        r.mark += 1;
        r.cleaned_at = [r.mark; NODES];
        for (closed, fenced) in r.gate_closed.iter_mut().zip(fence) {
            *closed |= fenced;
        }
    }

    /// Redis (or one primary of a cluster: `part`) comes back on
    /// `snapshot`. With `identity_check`, the replicas see another server
    /// before their next read (`identity`; on a cluster, a group or the
    /// control slot naming no live primary), and `Rebuilder::rebuild`
    /// starts: the groups are wiped and every node is to be cleaned before
    /// anything is placed.
    fn come_back_on(&mut self, snapshot: Snapshot, part: Part, g: Guards) {
        if part != Part::Control {
            self.mapping = snapshot.mapping;
            self.life = snapshot.life;
            self.unmapped_at = snapshot.unmapped_at;
        }
        if part != Part::Sessions {
            self.epoch = snapshot.epoch;
        }
        self.rollbacks += 1;
        if g.identity_check {
            self.mapping = None;
            self.rebuilding = true;
            self.to_rebuild = [true; NODES];
        }
    }

    fn redis(&self) -> Snapshot {
        Snapshot {
            mapping: self.mapping,
            life: self.life,
            epoch: self.epoch,
            unmapped_at: self.unmapped_at,
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            mapping: None,
            life: 0,
            lives: 0,
            handed: None,
            down: [false; NODES],
            held_down: [false; NODES],
            epoch: [0; NODES],
            fence: [false; NODES],
            unmapped_at: 0,
            snapshot: None,
            rollbacks: 0,
            rebuilding: false,
            to_rebuild: [false; NODES],
            rows: Vec::new(),
            tokens: Vec::new(),
            closed: false,
            version: 0,
            count: [0; NODES],
            since: [0; NODES],
            floor: [0; NODES],
            net: Vec::new(),
            replicas: Default::default(),
            acked: [false; REPLICAS],
            cleaner: Cleaner::Idle,
            cleans: 0,
            dead: [false; REPLICAS],
            lapsed: [false; REPLICAS],
            given_up: [false; REPLICAS],
            crashes: 0,
            lapses: 0,
            deadlines: 0,
            replay: None,
            replays: 0,
            cleaner_deaths: 0,
            recoveries: 0,
            presses: Vec::new(),
            truth: 0,
            taken_down_answering: false,
            answered_above_truth: false,
            losses: 0,
            restarts: 0,
            life_shown: [0; REPLICAS],
            shown_top: 0,
            forgot_shown: false,
            lost_shown: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if (s.presses.len() as u8) < self.presses && s.outstanding() < self.outstanding {
            for replica in 0..REPLICAS as u8 {
                if !s.dead[replica as usize] {
                    actions.push(Action::ClientPress { replica });
                }
            }
        }
        for (r, replica) in s.replicas.iter().enumerate() {
            let replica_id = r as u8;
            if s.dead[r] {
                actions.push(Action::ReplicaStarts {
                    replica: replica_id,
                });
                continue;
            }
            if s.crashes < self.crashes {
                actions.push(Action::ReplicaDies {
                    replica: replica_id,
                });
            }
            let (lapsed, given_up) = (s.lapsed[r], s.given_up[r]);
            if lapsed || given_up {
                actions.push(Action::Heartbeat {
                    replica: replica_id,
                });
            }
            // A silence starts with the first threshold it passes: the
            // replica's own, with `silence_order`; either, without.
            let may_fall_silent = s.lapses < self.lapses;
            if !lapsed && (given_up || may_fall_silent) {
                actions.push(Action::LeaseLapses {
                    replica: replica_id,
                });
            }
            let others_may_go_on = match self.guards.silence_order {
                true => lapsed,
                false => lapsed || may_fall_silent,
            };
            if !given_up && others_may_go_on {
                actions.push(Action::WaitRunsOut {
                    replica: replica_id,
                });
            }
            for work in &replica.work {
                let press = work.press;
                match work.step {
                    Step::Lookup => actions.push(Action::Lookup {
                        replica: replica_id,
                        press,
                    }),
                    Step::Fold => actions.push(Action::FoldOne {
                        replica: replica_id,
                        press,
                    }),
                    Step::Place { .. } => {
                        for node in 0..NODES as u8 {
                            actions.push(Action::Place {
                                replica: replica_id,
                                press,
                                node,
                            });
                        }
                    }
                    Step::Send { node, .. } => {
                        if !(self.guards.gate && replica.gate_closed[node as usize]) {
                            actions.push(Action::SendPress {
                                replica: replica_id,
                                press,
                            });
                        }
                    }
                    Step::Waiting { node, .. } => {
                        if s.reply_for(replica_id, press).is_some() {
                            actions.push(Action::ReadAnswer {
                                replica: replica_id,
                                press,
                            });
                        }
                        if s.deadlines < self.deadlines {
                            actions.push(Action::RequestTimeout {
                                replica: replica_id,
                                press,
                            });
                        }
                        if !(self.guards.answer_before_timer && s.answer_waiting(replica_id, node))
                        {
                            for (failed, sent) in
                                [(false, true), (true, true), (false, false), (true, false)]
                            {
                                actions.push(Action::Timer {
                                    replica: replica_id,
                                    press,
                                    failed,
                                    sent,
                                });
                            }
                        }
                    }
                }
            }
            if let Cleaner::Fenced { node, .. } = s.cleaner {
                if !s.acked[r] && (!self.guards.gate || replica.in_gate[node as usize] == 0) {
                    actions.push(Action::AckFence {
                        replica: replica_id,
                    });
                }
            }
        }
        for msg in &s.net {
            if matches!(msg, Msg::Press { .. } | Msg::Clean { .. }) {
                actions.push(Action::NodeReceives { msg: *msg });
            }
        }
        match s.cleaner {
            Cleaner::Idle => {
                for node in 0..NODES as u8 {
                    let mapped_here = matches!(s.mapping, Some((n, _)) if n == node);
                    let down = s.down[node as usize];
                    // A clean with archive of a node holding the session
                    // (expiry, removal), or the failover of a down one; or
                    // the rebuild's clean of each node.
                    if mapped_here && (down || s.cleans < self.cleans)
                        || s.to_rebuild[node as usize]
                    {
                        actions.push(Action::RaiseFence { node });
                    }
                }
                if s.recoveries < self.recoveries && !s.rebuilding {
                    for node in 0..NODES as u8 {
                        let n = node as usize;
                        let mapped_here = matches!(s.mapping, Some((m, _)) if m == node);
                        // Its failover, under the same lock, first.
                        let moved_off = !mapped_here || !self.guards.recovery_fails_over;
                        let gates_clear = (0..REPLICAS).all(|r| {
                            s.dead[r]
                                || s.given_up[r]
                                || !self.guards.gate
                                || s.replicas[r].in_gate[n] == 0
                        });
                        let held = self.guards.clean_timeout_keeps_down && s.held_down[n];
                        if s.down[n] && moved_off && gates_clear && !held {
                            actions.push(Action::NodeRecovers { node });
                        }
                    }
                }
            }
            Cleaner::Fenced { .. } => {
                let waited = (0..REPLICAS).all(|r| s.acked[r] || s.dead[r] || s.given_up[r]);
                let waited = waited || !self.guards.fence_acks;
                if waited {
                    actions.push(Action::CleanNode);
                }
            }
            Cleaner::Sent { node, token } => {
                let answered = s.net.contains(&Msg::Cleaned { node, token });
                if answered {
                    actions.push(Action::Settle { rebase: false });
                    if matches!(s.mapping, Some((n, _)) if n == node) {
                        actions.push(Action::Settle { rebase: true });
                    }
                }
                if !(self.guards.answer_before_timer && answered) {
                    actions.push(Action::CleanTimer);
                }
                if s.cleaner_deaths < self.cleaner_deaths {
                    actions.push(Action::CleanerDies);
                }
            }
        }
        if s.restarts < self.restarts {
            for node in 0..NODES as u8 {
                actions.push(Action::NodeRestarts { node });
            }
        }
        if s.replay.is_some() {
            actions.push(Action::ScriptRunsAgain);
        }
        if s.rollbacks < self.rollbacks && s.cleaner == Cleaner::Idle && !s.rebuilding {
            actions.push(Action::RedisRestartsEmpty);
            if s.snapshot.is_none() {
                actions.push(Action::RedisSaves);
            } else {
                for part in [Part::Whole, Part::Sessions, Part::Control] {
                    actions.push(Action::RedisRollsBack { part });
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let g = self.guards;
        match action {
            Action::ClientPress { replica } => {
                let press = s.presses.len() as u8;
                s.presses.push(Press {
                    answer: None,
                    counted: 0,
                    era: 0,
                });
                s.set_step(replica, press, Some(Step::Lookup));
            }
            Action::Lookup { replica, press } if s.rebuilding => {
                // 503 `registry_rebuilding`: nothing read, nothing sent.
                s.answer(replica, press, Answer::NotCounted);
            }
            Action::Lookup { replica, press } => {
                let mark = s.replicas[replica as usize].mark;
                let step = match s.mapping {
                    Some((node, base)) => Step::Send {
                        node,
                        base,
                        epoch: s.epoch[node as usize],
                        mark,
                        life: s.life,
                    },
                    None => Step::Fold,
                };
                s.set_step(replica, press, Some(step));
            }
            Action::FoldOne { replica, press } | Action::Place { replica, press, .. }
                if s.rebuilding =>
            {
                s.answer(replica, press, Answer::NotCounted);
            }
            Action::FoldOne { replica, press } => {
                let mark = s.replicas[replica as usize].mark;
                let step = Step::Place {
                    base: s.archived(g.clean_tokens),
                    version: s.version,
                    mark,
                };
                s.set_step(replica, press, Some(step));
            }
            Action::Place {
                replica,
                press,
                node,
            } => {
                let Some(Step::Place {
                    base,
                    version,
                    mark,
                }) = s.work(replica, press)
                else {
                    return None;
                };
                let chosen = (!s.down[node as usize]).then_some(node);
                let placed = placement::place(
                    s.mapping,
                    None,
                    version,
                    s.unmapped_at,
                    chosen,
                    base,
                    g.base_guard,
                );
                let Some(placed) = placed else {
                    if s.down.iter().all(|down| *down) {
                        // No node up: `Placed::NoNode`, 503.
                        s.answer(replica, press, Answer::NotCounted);
                        return Some(s);
                    }
                    return None; // the script chooses among up nodes only
                };
                let step = match placed {
                    Placed::Stale => Step::Fold,
                    Placed::Created { node, base } => {
                        if base < s.shown_top && version >= s.unmapped_at {
                            // It goes on from an archive, read since the
                            // session was last unmapped, that lacks an
                            // answer shown: it lost clicks (a failover that
                            // could not hand them over, Redis forgetting).
                            // A base folded before that unmap is no loss
                            // but the hole `base_guard` closes.
                            s.losses += 1;
                            s.shown_top = 0;
                        }
                        s.mapping = Some((node, base));
                        s.lives += 1;
                        s.life = s.lives;
                        s.life_shown = [0; REPLICAS];
                        s.forgot_shown = false;
                        if g.unmap_takes_its_own
                            && matches!(s.replay, Some(Replay::Unmap { node: n }) if n == node)
                        {
                            // Placed after the clean began: not its own.
                            s.replay = None;
                        }
                        Step::Send {
                            node,
                            base,
                            epoch: s.epoch[node as usize],
                            mark,
                            life: s.life,
                        }
                    }
                    Placed::Standing { node, base } => Step::Send {
                        node,
                        base,
                        epoch: s.epoch[node as usize],
                        mark,
                        life: s.life,
                    },
                };
                s.set_step(replica, press, Some(step));
            }
            Action::SendPress { replica, press } => {
                let Some(Step::Send {
                    node,
                    base,
                    epoch,
                    mark,
                    life,
                }) = s.work(replica, press)
                else {
                    return None;
                };
                if g.clean_mark && s.replicas[replica as usize].cleaned_at[node as usize] > mark {
                    // The node was cleaned since the mapping was read.
                    s.set_step(replica, press, Some(Step::Lookup));
                    return Some(s);
                }
                if s.down[node as usize] {
                    // The node failed meanwhile: nothing was sent.
                    let next = press::next(Heard::Failed { sent: false }, base);
                    s.go_on(replica, press, next);
                    return Some(s);
                }
                s.replicas[replica as usize].in_gate[node as usize] += 1;
                s.send(Msg::Press {
                    press,
                    replica,
                    node,
                    epoch,
                });
                // Sent while its lease had lapsed: void from the start.
                let lapses = match s.lapsed[replica as usize] {
                    true => u8::MAX,
                    false => s.replicas[replica as usize].lapses,
                };
                let waiting = Step::Waiting {
                    node,
                    base,
                    lapses,
                    epoch,
                    mark,
                    life,
                };
                s.set_step(replica, press, Some(waiting));
            }
            Action::ReadAnswer { replica, press } => {
                let Some(Step::Waiting {
                    node,
                    base,
                    lapses,
                    epoch,
                    life,
                    ..
                }) = s.work(replica, press)
                else {
                    return None;
                };
                let msg = s.reply_for(replica, press)?;
                s.net.retain(|m| *m != msg);
                let r = replica as usize;
                s.replicas[r].in_gate[node as usize] -= 1;
                // Its lease lapsed since the press went out: a fence may
                // have gone by without it.
                let silent = s.lapsed[r] || s.replicas[r].lapses != lapses;
                let heard = match msg {
                    Msg::Reply {
                        count: Some(count), ..
                    } => {
                        let now = NodeNow {
                            down: s.down[node as usize],
                            fenced: s.fence[node as usize],
                            epoch: s.epoch[node as usize],
                        };
                        let shown =
                            !g.lease_voids_answers || press::count_shown(silent, Some(now), epoch);
                        Heard::Counted { count, shown }
                    }
                    _ => Heard::Refused,
                };
                let next = press::next(heard, base);
                if let press::Next::Answer(total) = next {
                    s.remember(replica, node, life, total);
                }
                s.go_on(replica, press, next);
            }
            Action::Timer {
                replica,
                press,
                failed,
                sent,
            } => {
                let Some(Step::Waiting {
                    node,
                    base,
                    epoch,
                    mark,
                    life,
                    ..
                }) = s.work(replica, press)
                else {
                    return None;
                };
                if !sent {
                    // The connect timed out: the request never left, and
                    // the node never sees it.
                    let request = Msg::Press {
                        press,
                        replica,
                        node,
                        epoch,
                    };
                    if !s.net.contains(&request) {
                        return None;
                    }
                    s.net.retain(|m| *m != request);
                }
                if failed {
                    // Marked down before the gate opens.
                    s.mark_down(node, Some(replica));
                }
                s.replicas[replica as usize].in_gate[node as usize] -= 1;
                let heard = match failed {
                    true => Heard::Failed { sent },
                    false => Heard::Spared { sent },
                };
                let mut next = press::next(heard, base);
                if sent && failed && !g.retry_only_unsent {
                    // 0.1.0: failed over, then tried again elsewhere...
                    next = press::Next::Again(press::Again::FailOver);
                }
                if sent && !failed && !g.unknown_is_504 {
                    // ... and a spared node's silence answered 503.
                    s.answer(replica, press, Answer::NotCounted);
                    return Some(s);
                }
                if next == press::Next::Again(press::Again::Requeue) {
                    // Spared, not sent: queued again on the same mapping
                    // (`requeue`).
                    let send = Step::Send {
                        node,
                        base,
                        epoch,
                        mark,
                        life,
                    };
                    s.set_step(replica, press, Some(send));
                    return Some(s);
                }
                // A reply there or to come is read by nobody.
                s.drop_reply(replica, press);
                s.go_on(replica, press, next);
            }
            Action::RequestTimeout { replica, press } => {
                let Some(Step::Waiting { node, .. }) = s.work(replica, press) else {
                    return None;
                };
                s.replicas[replica as usize].in_gate[node as usize] -= 1;
                s.deadlines += 1;
                s.drop_reply(replica, press);
                s.answer(replica, press, Answer::Unknown);
            }
            Action::NodeReceives { msg } => {
                s.net.retain(|m| *m != msg);
                match msg {
                    Msg::Press {
                        press,
                        replica,
                        node,
                        epoch,
                    } => {
                        let n = node as usize;
                        let count = if g.fencing_epoch && self.fences(n) && epoch < s.floor[n] {
                            None
                        } else {
                            if s.count[n] == 0 && self.takes_tokens(n) {
                                s.since[n] = epoch;
                            }
                            s.count[n] += 1;
                            s.truth += 1;
                            s.presses[press as usize].counted += 1;
                            s.presses[press as usize].era = s.losses;
                            Some(s.count[n])
                        };
                        // To the press's connection: gone with a replica
                        // killed meanwhile, or read by nobody once its
                        // timer fired.
                        let waiting = matches!(s.work(replica, press), Some(Step::Waiting { .. }));
                        if waiting {
                            s.send(Msg::Reply {
                                press,
                                replica,
                                node,
                                count,
                            });
                        }
                    }
                    Msg::Clean {
                        node,
                        token,
                        archive,
                    } => {
                        let n = node as usize;
                        if self.takes_tokens(n) && s.count[n] > 0 && s.since[n] >= token {
                            // The count started under this clean's token or
                            // a newer one (a late clean, its timer fired, or
                            // one sent again): it takes nothing
                            // (click-node's `Counts::snapshot`).
                            s.floor[n] = s.floor[n].max(token);
                            s.send(Msg::Cleaned { node, token });
                            return Some(s);
                        }
                        if archive {
                            let stamp = if self.fences(n) { token } else { 0 };
                            let refused = g.late_rows_refused && stamp == 0 && s.closed;
                            if s.count[n] > 0 && !refused {
                                s.rows.push((stamp, s.count[n]));
                                s.rows.sort();
                            }
                        } else {
                            s.truth -= s.count[n];
                        }
                        s.count[n] = 0;
                        s.since[n] = 0;
                        s.floor[n] = s.floor[n].max(token);
                        s.send(Msg::Cleaned { node, token });
                    }
                    _ => return None,
                }
            }
            Action::RaiseFence { node } => {
                // A script runs again within its call, while its clean
                // still holds the node's lock: before the next operation.
                s.replay = None;
                s.fence[node as usize] = true;
                let archive = !s.down[node as usize];
                if std::mem::take(&mut s.to_rebuild[node as usize]) {
                    // The rebuild's own clean: no expiry's budget.
                } else if archive {
                    s.cleans += 1;
                }
                s.cleaner = Cleaner::Fenced { node, archive };
            }
            Action::AckFence { replica } => {
                let Cleaner::Fenced { node, archive } = s.cleaner else {
                    return None;
                };
                s.replicas[replica as usize].gate_closed[node as usize] = true;
                s.acked[replica as usize] = true;
                // A failover's acknowledgement hands over what the replica
                // showed of the session's placement on the node.
                let mapped_here = matches!(s.mapping, Some((n, _)) if n == node);
                if let Some((n, life, total)) = s.replicas[replica as usize].shown {
                    if g.hand_over && !archive && mapped_here && n == node && life == s.life {
                        s.handed = s.handed.max(Some(total));
                    }
                }
            }
            Action::CleanNode => {
                let Cleaner::Fenced { node, archive } = s.cleaner else {
                    return None;
                };
                if archive {
                    // `open_rows`: the rows of the node's sessions take its
                    // archive again (the rebuild's clean knows no session:
                    // it opens every row).
                    let mapped_here = matches!(s.mapping, Some((n, _)) if n == node);
                    if !self.takes_tokens(node as usize) && (mapped_here || s.rebuilding) {
                        s.closed = false;
                    }
                    s.tokens.push(Token::Issued);
                    let token = s.tokens.len() as u8;
                    s.send(Msg::Clean {
                        node,
                        token,
                        archive: true,
                    });
                    s.cleaner = Cleaner::Sent { node, token };
                } else {
                    // Failover (`fail_over_locked`): archive on the node's
                    // behalf what the replicas showed, under a token of its
                    // own issued settled (`archive_shown`); revoke what the
                    // node may yet archive; unmap (`move_sessions_off`).
                    let archived = s.archived(g.clean_tokens);
                    if let Some(clicks) = failover::handed_over(s.handed, archived) {
                        s.tokens.push(Token::Completed);
                        s.rows.push((s.tokens.len() as u8, clicks));
                        s.rows.sort();
                        s.version += 1;
                        // A node without tokens may yet archive the same
                        // clicks under a clean whose timer fired.
                        s.closed |= !self.takes_tokens(node as usize);
                    }
                    revoke_all(&mut s);
                    s.fail_over(node, g.clean_tokens);
                    s.lower_fence(node);
                }
            }
            Action::Settle { rebase } => {
                let Cleaner::Sent { node, token } = s.cleaner else {
                    return None;
                };
                s.net.retain(|m| *m != Msg::Cleaned { node, token });
                s.tokens[token as usize - 1] = Token::Completed;
                s.version += 1;
                let replay = match rebase {
                    true => {
                        let total = s.archived(g.clean_tokens);
                        s.mapping = placement::rebase(s.mapping, node, total);
                        Replay::Rebase { node, total }
                    }
                    false => {
                        s.unmap_if_on(node);
                        Replay::Unmap { node }
                    }
                };
                s.may_replay(replay, self.replays);
                s.epoch[node as usize] = token;
                s.lower_fence(node);
            }
            Action::NodeRestarts { node } => {
                // Its clicks are lost, not undone: the truth (what the
                // client pressed and a node counted) stays.
                let n = node as usize;
                if s.count[n] > 0 {
                    s.losses += 1;
                    s.shown_top = 0;
                }
                s.count[n] = 0;
                s.since[n] = 0;
                s.floor[n] = 0;
                s.restarts += 1;
            }
            Action::NodeRecovers { node } => {
                let n = node as usize;
                s.replay = None;
                let heard: [bool; REPLICAS] = std::array::from_fn(|r| !s.dead[r] && !s.given_up[r]);
                // Out of the guard, the wipe's own unmap (it waited for
                // every live replica, and hands nothing over).
                s.acked = heard;
                s.fail_over(node, g.clean_tokens);
                s.acked = [false; REPLICAS];
                // The wipe's token: nothing archives under it; it fences
                // out every older one. The node's counts are lost, not
                // undone (the truth stays); none is of the session's
                // placement, which left the node first.
                revoke_all(&mut s);
                s.tokens.push(Token::Completed);
                let token = s.tokens.len() as u8;
                s.epoch[n] = token;
                s.floor[n] = s.floor[n].max(token);
                s.count[n] = 0;
                s.since[n] = 0;
                s.down[n] = false;
                s.held_down[n] = false;
                for (replica, heard) in s.replicas.iter_mut().zip(heard) {
                    if heard {
                        replica.mark += 1;
                        replica.cleaned_at[n] = replica.mark;
                    }
                }
                s.recoveries += 1;
            }
            Action::ReplicaDies { replica } => {
                let r = replica as usize;
                s.forgot_shown |= s.life_shown[r] > 0;
                for work in std::mem::take(&mut s.replicas[r].work) {
                    s.presses[work.press as usize].answer = Some(Answer::Unknown);
                }
                s.replicas[r] = Replica::default();
                s.net
                    .retain(|m| !matches!(m, Msg::Reply { replica: to, .. } if *to == replica));
                s.dead[r] = true;
                (s.lapsed[r], s.given_up[r]) = (false, false);
                s.crashes += 1;
            }
            Action::LeaseLapses { replica } => {
                let r = replica as usize;
                if !s.given_up[r] {
                    s.lapses += 1;
                }
                s.lapsed[r] = true;
                s.replicas[r].lapses += 1;
            }
            Action::WaitRunsOut { replica } => {
                let r = replica as usize;
                if !s.lapsed[r] {
                    s.lapses += 1;
                }
                s.given_up[r] = true;
            }
            Action::Heartbeat { replica } => {
                // `FenceWatcher::poll_once`: after a lapse, every mapping
                // read before is void (`NodeTable::cleaned_all`); a replica
                // that never knew itself lapsed voids nothing.
                let r = replica as usize;
                if s.lapsed[r] {
                    s.honour_fences(replica);
                }
                (s.lapsed[r], s.given_up[r]) = (false, false);
            }
            Action::ReplicaStarts { replica } => {
                let r = replica as usize;
                s.dead[r] = false;
                (s.lapsed[r], s.given_up[r]) = (false, false);
                s.honour_fences(replica);
            }
            Action::RedisSaves => s.snapshot = Some(s.redis()),
            Action::RedisRollsBack { part } => {
                let snapshot = s.snapshot?;
                s.come_back_on(snapshot, part, g);
            }
            Action::RedisRestartsEmpty => {
                // Its files are lost too.
                s.snapshot = None;
                s.come_back_on(Snapshot::EMPTY, Part::Whole, g);
            }
            Action::CleanTimer => {
                let Cleaner::Sent { node, token } = s.cleaner else {
                    return None;
                };
                s.tokens[token as usize - 1] = Token::Revoked;
                s.mark_down(node, None);
                s.held_down[node as usize] = !self.takes_tokens(node as usize);
                if !g.clean_timer_hands_over {
                    s.fail_over(node, g.clean_tokens);
                    s.may_replay(Replay::Unmap { node }, self.replays);
                }
                // With the guard, the session stays on the down node until
                // its failover (`hand_over_and_move`): a fence of its own,
                // whose acknowledgements hand over what each replica
                // showed. The replicas' gates open in between (each one
                // honours the new fence as it polls), and the model lets
                // any other step in there, though the code holds the
                // node's lock throughout.
                s.lower_fence(node);
            }
            Action::CleanerDies => {
                let Cleaner::Sent { node, .. } = s.cleaner else {
                    return None;
                };
                s.cleaner_deaths += 1;
                if !g.journal {
                    // No journal: the fence runs stale and comes down; the
                    // token is never settled, nothing unmapped or re-based.
                    s.lower_fence(node);
                }
            }
            Action::ScriptRunsAgain => match s.replay.take()? {
                Replay::Unmap { node } => s.unmap_if_on(node),
                Replay::Rebase { node, total } => {
                    s.mapping = placement::rebase(s.mapping, node, total)
                }
            },
        }
        Some(s)
    }

    /// Retries and failovers could count and fence for ever: the check
    /// stops where a press has been counted more than twice over.
    fn within_boundary(&self, s: &State) -> bool {
        s.truth <= 2 * self.presses
            && s.tokens.len()
                <= 2 * (self.cleans + NODES as u8 * self.rollbacks) as usize + 1 + NODES
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("a press is counted at most once", |_, s: &State| {
                s.presses.iter().all(|p| p.counted <= 1)
            }),
            Property::always("a 503 means nothing was counted", |_, s: &State| {
                s.presses
                    .iter()
                    .all(|p| !(p.answer == Some(Answer::NotCounted) && p.counted > 0))
            }),
            Property::always(
                "no answer repeats another but for a failover or a restart",
                |_, s: &State| {
                    let shown = sorted(counted_answers(s));
                    shown.windows(2).all(|w| w[0] != w[1])
                },
            ),
            Property::always(
                "an answer skips only clicks whose outcome was not shown",
                |_, s: &State| no_unexplained_gap(s),
            ),
            Property::always("no answer is above the truth", |_, s: &State| {
                !s.answered_above_truth
            }),
            Property::always("no node is taken down while it answers", |_, s: &State| {
                !s.taken_down_answering
            }),
            Property::always(
                "a failover loses no click shown by a replica it heard from",
                |_, s: &State| !s.lost_shown,
            ),
            // Stateright checks `eventually` on acyclic paths only, and
            // retries make cycles: what is checked is that no state leaves
            // a press under way with nothing able to move (a deadlock).
            Property::always("a press under way can always go on", |m, s: &State| {
                s.outstanding() == 0 || m.can_go_on(s)
            }),
        ]
    }
}

impl Protocol {
    /// Whether a step other than a fault or a new press is possible: a
    /// timer, an answer, a clean's next step, a paused replica resuming.
    fn can_go_on(&self, s: &State) -> bool {
        let mut enabled = Vec::new();
        self.actions(s, &mut enabled);
        enabled.iter().any(|action| {
            let progress = !matches!(
                action,
                Action::ClientPress { .. }
                    | Action::NodeRestarts { .. }
                    | Action::NodeRecovers { .. }
                    | Action::ReplicaDies { .. }
                    | Action::LeaseLapses { .. }
                    | Action::WaitRunsOut { .. }
                    | Action::RequestTimeout { .. }
                    | Action::RedisSaves
                    | Action::RedisRollsBack { .. }
                    | Action::RedisRestartsEmpty
            );
            // Listed is not possible: `next_state` may refuse it.
            progress && self.next_state(s, *action).is_some()
        })
    }
}

/// Every 200 answer, with the failovers before its press was counted.
fn counted_answers(s: &State) -> Vec<(u8, u8)> {
    s.presses
        .iter()
        .filter_map(|p| match p.answer {
            Some(Answer::Counted(v)) => Some((p.era, v)),
            _ => None,
        })
        .collect()
}

/// Per era, consecutive 200 answers are one apart but for the presses of
/// that era counted and not answered 200 (504s, and those not answered
/// yet): each 200 answer is the previous one + 1 + those.
fn no_unexplained_gap(s: &State) -> bool {
    let answers = counted_answers(s);
    let eras: std::collections::BTreeSet<u8> = answers.iter().map(|(era, _)| *era).collect();
    eras.into_iter().all(|era| {
        let shown = sorted(
            answers
                .iter()
                .filter(|(e, _)| *e == era)
                .map(|(_, v)| *v)
                .collect(),
        );
        let skipped: u32 = shown
            .windows(2)
            .map(|w| u32::from(w[1] - w[0]).saturating_sub(1))
            .sum();
        let unshown = s
            .presses
            .iter()
            .filter(|p| {
                p.era == era && p.counted > 0 && !matches!(p.answer, Some(Answer::Counted(_)))
            })
            .count() as u32;
        skipped <= unshown
    })
}

/// Every token not settled is revoked: what the node archives with it
/// later never counts (`fence_out`).
fn revoke_all(s: &mut State) {
    for token in &mut s.tokens {
        if *token == Token::Issued {
            *token = Token::Revoked;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A press that waits at a gate closed for a fence no cleaner holds
    /// is stuck for ever: the property says so.
    #[test]
    fn a_press_at_a_gate_no_clean_will_open_cannot_go_on() {
        let protocol = Protocol {
            guards: Guards::ALL,
            presses: 1,
            outstanding: 1,
            cleans: 0,
            restarts: 0,
            rollbacks: 0,
            crashes: 0,
            lapses: 0,
            deadlines: 0,
            replays: 0,
            fencing: 1,
            cleaner_deaths: 0,
            recoveries: 0,
        };
        let mut s = protocol.init_states().remove(0);
        s.presses.push(Press {
            answer: None,
            counted: 0,
            era: 0,
        });
        let send = Step::Send {
            node: 0,
            base: 0,
            epoch: 0,
            mark: 0,
            life: 0,
        };
        s.set_step(0, 0, Some(send));
        assert!(protocol.can_go_on(&s), "an open gate lets it go on");
        s.replicas[0].gate_closed[0] = true;
        assert!(!protocol.can_go_on(&s));
    }
}
