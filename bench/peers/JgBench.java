// One member process of the JGroups benchmarks in `make bench-peers`.
//
//   java -cp jgroups.jar:DIR JgBench tput --config udp.xml --members N --index I
//        --count C --warmup W --size B --senders S [--total] [--deadline SECONDS]
//     Joins the group, waits for N members, and (when I < S) casts W warm-up
//     messages then C messages of B bytes to the group. With --total,
//     SEQUENCER is inserted under FRAG2 (as in JGroups' sequencer.xml), which
//     orders every cast through the coordinator. Every member checks each
//     sender's messages arrive once and in order, folds the order of all
//     deliveries into a hash (equal at every member when the order is
//     total), and times its first to its last measured delivery.
//   java ... JgBench tput ... --rounds R
//     JGroups at its best (run in a JVM with a fixed heap and G1, by the
//     script): W warm-up messages, then R timed rounds of C messages per
//     sender, back to back in the same JVM, counted without a lock
//     (AtomicLong, AtomicIntegerArray: no synchronized on the delivery
//     path). Each member times every round from its first to its last
//     delivery of that round; its figure is its median round, and every
//     round is printed (round_msgs_per_s=...).
//   java ... JgBench rtt --config tcp.xml --index 0|1 --count C --warmup W --size B
//     Two members; 0 casts a message, 1 casts it back on delivery; 0 times
//     each round trip.
//
// Every run is bounded by --deadline. The result is one line of key=value
// pairs on stdout starting with "result"; errors go to stderr, exit 1.

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import org.jgroups.BytesMessage;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.Receiver;
import org.jgroups.View;
import org.jgroups.protocols.FRAG2;
import org.jgroups.protocols.SEQUENCER;
import org.jgroups.stack.ProtocolStack;

public class JgBench implements Receiver {
  static final int WARM = 0, DATA = 1, DONE = 2, PING = 3, PONG = 4, STOP = 5;

  String config = "udp.xml";
  int members = 3, index, count = 100000, warmup = 20000, size = 1024, senders = 1;
  boolean total;
  int rounds; // 0: today's configuration; R > 0: R timed rounds, lock-free counting
  double deadlineS = 60;
  long deadline;

  volatile int viewSize;
  final int[] nextSeq = new int[64];
  final int[] nextWarm = new int[64];
  long delivered, warmDelivered, errors, doneFrom;
  long firstNs, lastNs;
  long orderHash = 0xcbf29ce484222325L;
  final LinkedBlockingQueue<Integer> rtt = new LinkedBlockingQueue<>();
  volatile boolean stopped;
  JChannel ch;

  // Lock-free counting (--rounds): kind WARM or DATA + round (1..R).
  AtomicLong bWarm = new AtomicLong(), bDelivered = new AtomicLong(), bErrors = new AtomicLong(),
      bDone = new AtomicLong(), bHash = new AtomicLong(0xcbf29ce484222325L);
  AtomicLongArray bRound, bFirst, bLast;
  final AtomicIntegerArray bNext = new AtomicIntegerArray(64);

  static long foldInto(long h, int x) {
    for (int i = 0; i < 4; i++) {
      h ^= (x >>> (8 * i)) & 0xff;
      h *= 0x100000001b3L;
    }
    return h;
  }

  // Deliveries from one sender come one at a time (JGroups orders them), so
  // each sender's next sequence number has one writer at a time; with total
  // order every delivery comes through the sequencer, one at a time.
  void receiveBest(int kind, int from, int seq, int len) {
    if (kind == DONE) {
      bDone.getAndAccumulate(1L << (from & 63), (a, b) -> a | b);
      return;
    }
    if (from < 0 || from >= senders) {
      bErrors.incrementAndGet();
      return;
    }
    if (seq != bNext.get(from) || len != size) bErrors.incrementAndGet();
    bNext.set(from, seq + 1);
    if (kind == WARM) {
      bWarm.incrementAndGet();
      return;
    }
    int r = kind - 100;
    if (r < 1 || r > rounds) {
      bErrors.incrementAndGet();
      return;
    }
    long t = System.nanoTime();
    bFirst.compareAndSet(r, 0, t);
    bLast.accumulateAndGet(r, t, Math::max);
    bRound.incrementAndGet(r);
    bDelivered.incrementAndGet();
    if (total) {
      long h = bHash.get();
      bHash.set(foldInto(foldInto(h, from), seq));
    }
  }

  void fold(int x) {
    for (int i = 0; i < 4; i++) {
      orderHash ^= (x >>> (8 * i)) & 0xff;
      orderHash *= 0x100000001b3L;
    }
  }

  @Override
  public void viewAccepted(View v) {
    viewSize = v.size();
  }

  @Override
  public void receive(Message msg) {
    byte[] a = msg.getArray();
    int off = msg.getOffset(), len = msg.getLength();
    if (len < 12) {
      synchronized (this) { errors++; }
      return;
    }
    ByteBuffer b = ByteBuffer.wrap(a, off, len);
    int kind = b.getInt(), from = b.getInt(), seq = b.getInt();
    if (rounds > 0) {
      receiveBest(kind, from, seq, len);
      return;
    }
    synchronized (this) {
      switch (kind) {
        case WARM:
          warmDelivered++;
          if (from < 0 || from >= 64 || seq != nextWarm[from]) errors++;
          else nextWarm[from] = seq + 1;
          break;
        case DATA:
          long t = System.nanoTime();
          if (delivered == 0) firstNs = t;
          lastNs = t;
          delivered++;
          if (from < 0 || from >= senders || seq != nextSeq[from] || len != size) errors++;
          if (from >= 0 && from < 64) nextSeq[from] = seq + 1;
          fold(from);
          fold(seq);
          break;
        case DONE:
          doneFrom |= 1L << (from & 63);
          break;
        case PING:
          if (index == 1) rtt.add(seq);
          break;
        case PONG:
          if (index == 0 && from == 1) rtt.add(seq);
          break;
        case STOP:
          stopped = true;
          break;
        default:
          errors++;
      }
      if (kind != WARM && (kind != DATA || delivered == (long) count * senders)) notifyAll();
    }
  }

  void cast(int kind, int seq, int len) throws Exception {
    // A fresh array each time: JGroups keeps it for retransmission.
    byte[] a = new byte[len];
    ByteBuffer.wrap(a).putInt(kind).putInt(index).putInt(seq);
    ch.send(new BytesMessage(null, a));
  }

  void fail(String why) {
    System.err.println("JgBench: " + why);
    System.exit(1);
  }

  boolean late() {
    return System.nanoTime() > deadline;
  }

  void waitMembers(int n) throws InterruptedException {
    while (viewSize < n) {
      if (late()) fail("only " + viewSize + " of " + n + " members before the deadline");
      Thread.sleep(10);
    }
  }

  // Waits (bounded by the deadline) until cond holds.
  interface Cond { boolean ok(); }

  synchronized void await(Cond c) throws InterruptedException {
    while (!c.ok() && !late()) wait(20);
  }

  int tput() throws Exception {
    waitMembers(members);
    if (index < senders) {
      for (int i = 0; i < warmup && !late(); i++) cast(WARM, i, size);
      for (int i = 0; i < count && !late(); i++) cast(DATA, i, size);
    }
    long expected = (long) count * senders;
    await(() -> delivered >= expected);
    // Stay until every member has everything, so that nobody leaves early.
    cast(DONE, 0, 12);
    long all = members >= 64 ? -1L : (1L << members) - 1;
    await(() -> (doneFrom & all) == all);
    double span;
    long d, e, h;
    synchronized (this) {
      span = (lastNs - firstNs) / 1e9;
      d = delivered;
      e = errors;
      h = orderHash;
    }
    System.out.printf(
        "result bench=tput system=jgroups config=%s order=%s index=%d members=%d senders=%d bytes=%d count=%d"
            + " warmup=%d delivered=%d expected=%d errors=%d span_s=%.6f msgs_per_s=%.0f order_hash=%016x%n",
        config, total ? "total" : "fifo", index, members, senders, size, count, warmup, d, expected, e, span,
        d > 1 && span > 0 ? (d - 1) / span : 0.0, h);
    return d == expected && e == 0 ? 0 : 1;
  }

  // At its best: warm-up and the timed rounds back to back, in one JVM; the
  // sequence numbers of a sender run on from the warm-up through the rounds.
  int tputBest() throws Exception {
    bRound = new AtomicLongArray(rounds + 1);
    bFirst = new AtomicLongArray(rounds + 1);
    bLast = new AtomicLongArray(rounds + 1);
    waitMembers(members);
    if (index < senders) {
      int seq = 0;
      for (int i = 0; i < warmup && !late(); i++) cast(WARM, seq++, size);
      for (int r = 1; r <= rounds; r++)
        for (int i = 0; i < count && !late(); i++) cast(100 + r, seq++, size);
    }
    long expected = (long) count * senders * rounds;
    while (bDelivered.get() < expected && bErrors.get() == 0 && !late()) Thread.sleep(1);
    cast(DONE, 0, 12);
    long all = members >= 64 ? -1L : (1L << members) - 1;
    while ((bDone.get() & all) != all && !late()) Thread.sleep(1);
    double[] rates = new double[rounds];
    StringBuilder rs = new StringBuilder();
    double spanAll = 0;
    for (int r = 1; r <= rounds; r++) {
      double span = (bLast.get(r) - bFirst.get(r)) / 1e9;
      long d = bRound.get(r);
      rates[r - 1] = d > 1 && span > 0 ? (d - 1) / span : 0.0;
      spanAll += span;
      rs.append(r > 1 ? "," : "").append(String.format("%.0f", rates[r - 1]));
    }
    double[] sorted = rates.clone();
    Arrays.sort(sorted);
    double med = rounds % 2 == 1 ? sorted[rounds / 2] : (sorted[rounds / 2 - 1] + sorted[rounds / 2]) / 2;
    long d = bDelivered.get(), e = bErrors.get();
    System.out.printf(
        "result bench=tput system=jgroups variant=best config=%s order=%s index=%d members=%d senders=%d bytes=%d"
            + " count=%d rounds=%d warmup=%d warm_delivered=%d delivered=%d expected=%d errors=%d span_s=%.6f"
            + " round_msgs_per_s=%s msgs_per_s=%.0f order_hash=%016x%n",
        config, total ? "total" : "fifo", index, members, senders, size, count, rounds, warmup, bWarm.get(), d,
        expected, e, spanAll, rs, med, bHash.get());
    return d == expected && e == 0 ? 0 : 1;
  }

  int rtt() throws Exception {
    waitMembers(2);
    if (index == 1) {
      while (!stopped && !late()) {
        Integer s = rtt.poll(20, TimeUnit.MILLISECONDS);
        if (s != null) cast(PONG, s, size);
      }
      System.out.println("result bench=rtt system=jgroups role=pong");
      return stopped ? 0 : 1;
    }
    double[] samples = new double[count];
    for (int i = 0; i < warmup + count; i++) {
      long t0 = System.nanoTime();
      cast(PING, i, size);
      for (;;) {
        Integer s = rtt.poll(20, TimeUnit.MILLISECONDS);
        if (s != null && s == i) break;
        if (late()) fail("deadline at round trip " + i);
      }
      if (i >= warmup) samples[i - warmup] = (System.nanoTime() - t0) / 1e3;
    }
    cast(STOP, 0, 12);
    Thread.sleep(50);
    double sum = 0;
    for (double x : samples) sum += x;
    Arrays.sort(samples);
    double median = count % 2 == 1 ? samples[count / 2] : (samples[count / 2 - 1] + samples[count / 2]) / 2;
    System.out.printf(
        "result bench=rtt system=jgroups config=%s role=ping bytes=%d n=%d min_us=%.2f median_us=%.2f p99_us=%.2f"
            + " mean_us=%.2f%n",
        config, size, count, samples[0], median, samples[(int) Math.round(0.99 * (count - 1))], sum / count);
    return 0;
  }

  static int num(String s, int lo, int hi) {
    try {
      int v = Integer.parseInt(s);
      if (v >= lo && v <= hi) return v;
    } catch (NumberFormatException e) {
    }
    System.err.println("JgBench: " + s + ": expected a number from " + lo + " to " + hi);
    System.exit(2);
    return 0;
  }

  public static void main(String[] args) throws Exception {
    JgBench b = new JgBench();
    if (args.length < 1 || !(args[0].equals("tput") || args[0].equals("rtt"))) {
      System.err.println("usage: JgBench tput|rtt --config FILE --index I [--members N --count C --warmup W"
          + " --size B --senders S --total --rounds R --deadline SECONDS]");
      System.exit(2);
    }
    for (int i = 1; i < args.length; i++) {
      String k = args[i];
      if (k.equals("--total")) { b.total = true; continue; }
      if (i + 1 >= args.length) { System.err.println("JgBench: " + k + " needs a value"); System.exit(2); }
      String v = args[++i];
      switch (k) {
        case "--config": b.config = v; break;
        case "--members": b.members = num(v, 2, 63); break;
        case "--index": b.index = num(v, 0, 62); break;
        case "--count": b.count = num(v, 1, 10000000); break;
        case "--warmup": b.warmup = num(v, 0, 10000000); break;
        case "--size": b.size = num(v, 12, 60000); break;
        case "--senders": b.senders = num(v, 1, 63); break;
        case "--deadline": b.deadlineS = num(v, 1, 3600); break;
        case "--rounds": b.rounds = num(v, 1, 100); break;
        default: System.err.println("JgBench: unknown option " + k); System.exit(2);
      }
    }
    if (b.senders > b.members) b.senders = b.members;
    b.deadline = System.nanoTime() + (long) (b.deadlineS * 1e9);
    b.ch = new JChannel(b.config);
    if (b.total) {
      b.ch.getProtocolStack().insertProtocol(new SEQUENCER(), ProtocolStack.Position.BELOW, FRAG2.class);
    }
    b.ch.setReceiver(b);
    b.ch.setName("m" + b.index);
    b.ch.connect("consort-bench");
    int rc = args[0].equals("tput") ? (b.rounds > 0 ? b.tputBest() : b.tput()) : b.rtt();
    b.ch.close();
    System.exit(rc);
  }
}
