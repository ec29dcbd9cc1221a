(** The event loop: one per process, single-threaded.

    A loop owns a monotonic clock, a heap of timers and a set of file descriptors watched for
    reading. {!run} waits for the earliest timer or a readable descriptor (with epoll and a timer
    descriptor, never early; {!timer_arms}) and calls back. Callbacks must not block: they run on
    the loop, and nothing else happens while they run.

    A callback that raises is never called again, and does not stop the loop: the exception is
    logged once (source ["consort.loop"], level error), counted in {!errors}, passed to the owner's
    handler ({!on_error}), and the loop goes on with the next callback. A timer fires once anyway; a
    descriptor whose callback raised is unwatched first (its data is most likely still there, and
    the callback would be called again at once, for ever). The owner decides what the failure means:
    a process that cannot do its job without that descriptor (a member whose log cannot be written,
    say) stops cleanly from its handler (one line, a clean leave, exit 2); it never carries on
    without it in silence.

    Timers due at the same time fire in the order they were set. *)

type t

val create : unit -> t
(** [create ()] is a loop with no timers and no watched descriptors. *)

val now : t -> Consort.Time.t
(** [now t] is the monotonic clock in nanoseconds (its origin is arbitrary; only differences mean
    something). *)

val clock : unit -> Consort.Time.t
(** [clock ()] reads the clock {!now} reads, with no loop at hand (a stack's [now] outside a member
    process's loop); it allocates nothing. *)

(** {1 Timers} *)

type timer

val at : t -> Consort.Time.t -> (unit -> unit) -> timer
(** [at t time f] calls [f] once, during {!run}, at or after [time]. *)

val after : t -> Consort.Time.t -> (unit -> unit) -> timer
(** [after t d f] is [at t (now t + d) f]. *)

val cancel : timer -> unit
(** [cancel tm] removes [tm] if it has not fired; otherwise does nothing. *)

val is_pending : timer -> bool
(** [is_pending tm] is [true] until [tm] fires or is cancelled. *)

val timers : t -> int
(** The number of pending timers. *)

(** {1 Descriptors} *)

val watch :
  ?try_read:(unit -> bool) ->
  ?wait_read:(unit -> bool) ->
  ?wait_within:Consort.Time.t ->
  t ->
  Unix.file_descr ->
  (unit -> unit) ->
  unit
(** [watch t fd f] calls [f] during {!run} each time [fd] is readable, until {!unwatch}. Descriptors
    ready together are served in the order they were watched. Closing [fd] without {!unwatch} stops
    its callbacks.

    [try_read] reads [fd] without waiting, serves what it read as [f] would, and says whether it
    found anything. When [fd] is the only descriptor watched and the loop has no spin ({!set_spin}),
    {!run} calls it before each wait that may block instead of asking the kernel whether [fd] is
    readable first: an answer that is there already costs one system call instead of two. After a
    [try_read] that found nothing, the next waits go to the kernel directly (1, 2, 4, up to 64 of
    them, back to none once a [try_read] finds something), so that a descriptor whose data never
    comes early costs at most one more system call in 64 waits. {!step} never calls it.

    [wait_read] reads [fd], waiting at most [wait_within] (default and least {!wait_quantum}) for
    something to come (a socket in blocking mode with a receive timeout: the kernel keeps it in
    whole clock ticks and may wait one tick more, so a socket's [wait_within] is two of the ticks
    its timeout was rounded up to), serves what it read as [f] would, and says whether it found
    anything. When [fd] is the only descriptor watched, the loop has no spin, its descriptor was not
    given out ({!descriptor}) and no deadline is due within [wait_within], {!run} waits by calling
    it instead of [epoll_wait] then [try_read] or [f]: one system call where a wait and a read are
    two. A deadline within [wait_within] is waited for in the kernel, so timers are not late. After
    a [wait_read] that found nothing, the next waits go to the kernel (1, 2, 4, up to 64 of them,
    back to none once a [wait_read] finds something): an idle descriptor costs at most one wake-up
    for nothing in 64 waits.
    @raise Invalid_argument if [fd] is already watched.
    @raise Unix.Unix_error if [fd] cannot be watched (a regular file). *)

val unwatch : t -> Unix.file_descr -> unit
(** [unwatch t fd] stops watching [fd]; a callback for it that has not run yet in the current round
    does not run. Unknown descriptors are ignored. *)

val watched : t -> int
(** The number of watched descriptors. *)

(** {1 Running} *)

val run : ?until:(unit -> bool) -> ?timeout:Consort.Time.t -> t -> unit
(** [run ?until ?timeout t] calls back timers and readable descriptors until one of: {!stop} is
    called, [until ()] is [true] (checked before each wait and after each round of callbacks),
    [timeout] nanoseconds have passed since the call, or there is nothing left to wait for (no timer
    and no descriptor). Without [until] and [timeout] a loop with a descriptor runs until {!stop}.
    @raise Invalid_argument if [t] is already running (runs do not nest). *)

val set_spin : ?yield:bool -> t -> Consort.Time.t -> unit
(** [set_spin t d]: before {!run} blocks waiting for a descriptor, it polls them for up to [d]
    nanoseconds (0, the default: it blocks at once). A process that answers quickly saves the
    wake-up of a sleeping one, at the price of that much CPU each time it goes idle. With [yield]
    (default [false]) it yields the CPU between two polls ({!yield}): a process on the same CPU that
    polls too runs meanwhile (without it, two polling processes on one CPU take turns only when
    one's polling ends). A process beside it that sleeps is better served without: woken, it takes
    the CPU from the polling one at once, where yielding delays both. *)

val yield : unit -> unit
(** [yield ()] lets another task runnable on this CPU run first ([sched_yield]); returns at once
    when there is none. *)

val stop : t -> unit
(** [stop t] makes the current {!run} return once the running callback returns. A later {!run}
    starts afresh. *)

val errors : t -> int
(** The number of callbacks that raised since [t] was created. *)

(** A callback that raised, with its exception: a timer, or a descriptor's callback (or its
    [try_read]), the descriptor already unwatched. *)
type failure = Timer of exn | Descriptor of Unix.file_descr * exn

val on_error : t -> (failure -> unit) -> unit
(** [on_error t f]: [f] is called, on the loop, after each callback that raised has been logged and
    counted (and its descriptor unwatched): the owner escalates there (stops, leaves, exits). One
    handler; a later call replaces it. A handler that raises is logged and otherwise ignored. *)

val kernel_waits : t -> int
(** The number of times {!run} asked the kernel to wait for descriptors with a timeout other than 0
    (each an [epoll_wait] that may block), since [t] was created. *)

val timer_arms : t -> int
(** The number of times {!run} armed its kernel timer, since [t] was created. A wait for descriptors
    until a deadline does not give the kernel a timeout (which arms a kernel timer and cancels it
    each time a descriptor is ready first): {!run} keeps one timer descriptor among those it waits
    for, armed only when the deadline comes before the time it is armed for, or that time has
    passed. *)

val wait_quantum : Consort.Time.t
(** The receive timeout a descriptor read by a [wait_read] ({!watch}) asks for: 500 us (the kernel
    rounds it up to a clock tick). *)

val wait_reads : t -> int
(** The number of [wait_read]s ({!watch}) that found something, since [t] was created. *)

val early_reads : t -> int
(** The number of [try_read]s ({!watch}) that found something, since [t] was created. *)

(** {1 Driving the loop from another event loop}

    A program with its own event loop (Lwt, Async, a GUI toolkit, a hand-written [select]) runs
    Consort without a thread and without polling: it watches one descriptor, keeps one timer for the
    next deadline, and calls {!step} when either fires. [consort.lwt] ({!Consort_lwt}) does exactly
    this for Lwt.

    {[
      let fd = Loop.descriptor loop in
      (* when fd is readable, or the deadline passes: *)
      Loop.step loop
      (* then wait again for fd, and until Loop.next_deadline loop *)
    ]}

    {!on_wakeup} tells the host loop when a new timer comes before the deadline it waits for (a cast
    sets a retransmission timer, say). *)

val descriptor : t -> Unix.file_descr
(** One descriptor that is readable whenever a watched descriptor is (the loop's epoll descriptor),
    the same for the life of the loop once asked for. Only wait for it to be readable; never read
    it. *)

val next_deadline : t -> Consort.Time.t option
(** The earliest timer's time ({!now}'s clock), if any. *)

val on_wakeup : t -> (unit -> unit) -> unit
(** [on_wakeup t f]: [f ()] is called each time a timer is set that comes before every other pending
    timer, so that the host loop can wait less. One callback; a later call replaces it. *)

val step : t -> unit
(** [step t] fires the timers due now and serves the descriptors ready now, without waiting, then
    returns.
    @raise Invalid_argument inside {!run} or another {!step}. *)
