import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;

/**
 * KIP-848's consumer group protocol (group.protocol=consumer) with Kafka's Java client 4.x,
 * one scenario per run (--scenario=):
 *
 * <ul>
 *   <li>group: members 0 and 1 consume a topic while a producer keeps writing; member 2 joins,
 *       then member 0 leaves; every record read once, offsets committed after each poll and on
 *       revocation; the group as the Admin client describes and lists it.
 *   <li>regex: one member subscribes with a SubscriptionPattern (resolved by the broker); a topic
 *       created afterwards that matches it reaches the member's assignment, and its records too.
 *   <li>static: three static members (group.instance.id); member 1 closes and a new instance of
 *       it comes back: it gets the same partitions and the others give up none.
 * </ul>
 *
 * Args: --scenario= --bootstrap= --group= --topic= (group, static) --prefix= (regex)
 *       --assignor=uniform|range (optional)
 */
public final class Kip848 {
    static final List<Object> consumed = Collections.synchronizedList(new ArrayList<>());

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final int index;
        final KafkaConsumer<byte[], byte[]> consumer;
        final Object subscription;
        final Set<TopicPartition> assigned = Collections.synchronizedSet(new HashSet<>());
        // The next offset to read of each partition it read from (what it commits on revocation:
        // a partition given up before its first fetch has no position to ask for).
        final Map<TopicPartition, Long> next = new HashMap<>();
        final List<Object> events = Collections.synchronizedList(new ArrayList<>());
        volatile boolean stop;
        volatile Throwable failure;

        Member(int index, Properties props, Object subscription) {
            this.index = index;
            this.consumer = new KafkaConsumer<>(props);
            this.subscription = subscription;
        }

        @Override
        public void run() {
            try {
                if (subscription instanceof SubscriptionPattern pattern) {
                    consumer.subscribe(pattern, this);
                } else {
                    consumer.subscribe(List.of((String) subscription), this);
                }
                while (!stop) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        consumed.add(Json.obj("member", index, "topic", r.topic(), "partition", r.partition(),
                                "offset", r.offset(), "value", r.value()));
                        next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    }
                    if (!records.isEmpty()) {
                        try {
                            consumer.commitSync();
                        } catch (KafkaException e) {
                            events.add(Json.obj("kind", "commit_failed", "error", e.getClass().getSimpleName()));
                        }
                    }
                }
            } catch (Throwable t) {
                failure = t;
            } finally {
                consumer.close(); // a dynamic member leaves (epoch -1), a static one with -2
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            assigned.addAll(partitions);
            events.add(Json.obj("kind", "assigned", "partitions", names(partitions)));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            for (TopicPartition tp : partitions) {
                Long offset = next.remove(tp);
                if (offset != null) positions.put(tp, new OffsetAndMetadata(offset));
            }
            try {
                if (!positions.isEmpty()) consumer.commitSync(positions);
            } catch (KafkaException e) {
                events.add(Json.obj("kind", "revoked_uncommitted", "error", e.getClass().getSimpleName()));
            }
            assigned.removeAll(partitions);
            events.add(Json.obj("kind", "revoked", "partitions", names(partitions)));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            assigned.removeAll(partitions);
            events.add(Json.obj("kind", "lost", "partitions", names(partitions)));
        }

        List<String> owned() {
            synchronized (assigned) {
                return names(assigned);
            }
        }
    }

    static List<String> names(Collection<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.topic() + ":" + tp.partition());
        Collections.sort(out);
        return out;
    }

    static Properties props(Map<String, String> args, int index) {
        Properties p = Common.consumerProps(args.get("bootstrap"), args.get("group"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, args.get("group") + "-member-" + index);
        if (args.containsKey("assignor")) p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, args.get("assignor"));
        return p;
    }

    static Thread start(Member m) {
        Thread t = new Thread(m, "member-" + m.index);
        t.setDaemon(true); // a failure in main ends the JVM at once, not at the test's timeout
        t.start();
        return t;
    }

    /** Wait until ``members`` split ``partitions`` (topic:partition names) between them evenly
     * (reconciliation is incremental: a member may hold part of its share for a moment). */
    static void awaitSplit(List<Member> members, Set<String> partitions, String what) throws Exception {
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (true) {
            Set<String> union = new TreeSet<>();
            int total = 0;
            int least = Integer.MAX_VALUE;
            int most = 0;
            for (Member m : members) {
                if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
                List<String> owned = m.owned();
                least = Math.min(least, owned.size());
                most = Math.max(most, owned.size());
                union.addAll(owned);
                total += owned.size();
            }
            if (least > 0 && most - least <= 1 && union.equals(partitions) && total == partitions.size()) return;
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(what + ": no split assignment in time: " + assignments(members));
            }
            Thread.sleep(50);
        }
    }

    static Map<String, Object> assignments(List<Member> members) {
        Map<String, Object> out = new TreeMap<>();
        for (Member m : members) out.put(String.valueOf(m.index), m.owned());
        return out;
    }

    static Set<String> all(String topic, int partitions) {
        Set<String> out = new TreeSet<>();
        for (int p = 0; p < partitions; p++) out.add(topic + ":" + p);
        return out;
    }

    static Admin admin(String bootstrap) {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(ap);
    }

    static void describe(Admin admin, String group, String event) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        List<Object> members = new ArrayList<>();
        for (MemberDescription md : d.members()) {
            members.add(Json.obj("client_id", md.clientId(), "member_id", md.consumerId(),
                    "instance_id", md.groupInstanceId().orElse(null),
                    "member_epoch", md.memberEpoch().orElse(null),
                    "upgraded", md.upgraded().orElse(null),
                    "partitions", names(md.assignment().topicPartitions()),
                    "target", md.targetAssignment().map(a -> (Object) names(a.topicPartitions())).orElse(null)));
        }
        String type = null;
        for (ConsumerGroupListing l : admin.listConsumerGroups().all().get()) {
            if (l.groupId().equals(group)) type = l.type().map(Object::toString).orElse(null);
        }
        Json.emit(event, "type", d.type().toString(), "listed_type", type, "state", d.groupState().toString(),
                "assignor", d.partitionAssignor(), "group_epoch", d.groupEpoch().orElse(null),
                "assignment_epoch", d.targetAssignmentEpoch().orElse(null), "members", members);
    }

    static int partitionCount(String bootstrap, String topic) {
        try (KafkaConsumer<byte[], byte[]> probe = new KafkaConsumer<>(Common.consumerProps(bootstrap, null))) {
            return Common.partitions(probe, topic).size();
        }
    }

    // -- group: joining and leaving while records flow ----------------------------------------------

    static void group(Map<String, String> args) throws Exception {
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        Set<String> every = all(topic, partitionCount(bootstrap, topic));
        AtomicBoolean producing = new AtomicBoolean(true);
        AtomicInteger produced = new AtomicInteger();
        Thread producer = new Thread(() -> {
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(Common.producerProps(bootstrap))) {
                while (producing.get()) {
                    int i = produced.get();
                    byte[] key = ("k" + i).getBytes(StandardCharsets.UTF_8);
                    p.send(new ProducerRecord<>(topic, key, ("v" + i).getBytes(StandardCharsets.UTF_8))).get();
                    produced.incrementAndGet();
                    Thread.sleep(20);
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, "producer");
        producer.setDaemon(true);
        producer.start();

        List<Member> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            members.add(new Member(i, props(args, i), topic));
            threads.add(start(members.get(i)));
        }
        awaitSplit(members, every, "two members");
        Json.emit("two", "assignments", assignments(members), "consumed", consumed.size());

        members.add(new Member(2, props(args, 2), topic));
        threads.add(start(members.get(2)));
        awaitSplit(members, every, "a third member joined");
        Json.emit("three", "assignments", assignments(members), "consumed", consumed.size());
        try (Admin admin = admin(bootstrap)) {
            describe(admin, args.get("group"), "described");
        }

        members.get(0).stop = true;
        threads.get(0).join(Common.DEADLINE_MS);
        List<Member> survivors = members.subList(1, 3);
        awaitSplit(survivors, every, "member 0 left");
        Json.emit("after_leave", "assignments", assignments(survivors), "consumed", consumed.size());

        Thread.sleep(500); // a few more records after the last change
        producing.set(false);
        producer.join(Common.DEADLINE_MS);
        int total = produced.get();
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (distinct() < total && System.currentTimeMillis() < deadline) Thread.sleep(50);
        for (Member m : survivors) m.stop = true;
        for (Thread t : threads) t.join(Common.DEADLINE_MS);
        Map<String, Object> events = new TreeMap<>();
        for (Member m : members) {
            if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
            events.put(String.valueOf(m.index), new ArrayList<>(m.events));
        }
        Json.emit("consumed", "produced", total, "records", new ArrayList<>(consumed), "events", events);
        try (Admin admin = admin(bootstrap)) {
            Map<TopicPartition, Object> committed = new HashMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e :
                    admin.listConsumerGroupOffsets(args.get("group")).partitionsToOffsetAndMetadata().get().entrySet()) {
                committed.put(e.getKey(), e.getValue() == null ? null : e.getValue().offset());
            }
            Json.emit("committed", "offsets", Common.offsets(committed));
            describe(admin, args.get("group"), "described_empty");
        }
    }

    static int distinct() {
        synchronized (consumed) {
            Set<String> seen = new HashSet<>();
            for (Object o : consumed) {
                @SuppressWarnings("unchecked")
                Map<String, Object> r = (Map<String, Object>) o;
                seen.add(r.get("topic") + ":" + r.get("partition") + ":" + r.get("offset"));
            }
            return seen.size();
        }
    }

    // -- regex: a topic created later reaches the subscription ---------------------------------------

    static void regex(Map<String, String> args) throws Exception {
        String bootstrap = args.get("bootstrap");
        String prefix = args.get("prefix");
        String first = prefix + "-a";
        String later = prefix + "-b";
        Member m = new Member(0, props(args, 0), new SubscriptionPattern(prefix + "-.*"));
        Thread t = start(m);
        awaitSplit(List.of(m), all(first, partitionCount(bootstrap, first)), "the first topic");
        Json.emit("first", "assignments", assignments(List.of(m)));
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(later, 2, (short) 1))).all().get();
        }
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(Common.producerProps(bootstrap))) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(later, ("late-" + i).getBytes(StandardCharsets.UTF_8)));
            p.flush();
        }
        Set<String> both = all(first, partitionCount(bootstrap, first));
        both.addAll(all(later, 2));
        awaitSplit(List.of(m), both, "the topic created later");
        long deadline = System.currentTimeMillis() + Common.DEADLINE_MS;
        while (System.currentTimeMillis() < deadline && countTopic(later) < 10) Thread.sleep(50);
        Json.emit("later", "assignments", assignments(List.of(m)), "records", new ArrayList<>(consumed));
        try (Admin admin = admin(bootstrap)) {
            describe(admin, args.get("group"), "described");
        }
        m.stop = true;
        t.join(Common.DEADLINE_MS);
        if (m.failure != null) throw new RuntimeException("the member failed", m.failure);
    }

    static int countTopic(String topic) {
        synchronized (consumed) {
            int n = 0;
            for (Object o : consumed) {
                @SuppressWarnings("unchecked")
                Map<String, Object> r = (Map<String, Object>) o;
                if (topic.equals(r.get("topic"))) n++;
            }
            return n;
        }
    }

    // -- static: a member restarts and gets its partitions back --------------------------------------

    static void staticMembers(Map<String, String> args) throws Exception {
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        Set<String> every = all(topic, partitionCount(bootstrap, topic));
        List<Member> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Properties p = props(args, i);
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("group") + "-instance-" + i);
            members.add(new Member(i, p, topic));
            threads.add(start(members.get(i)));
        }
        awaitSplit(members, every, "three static members");
        Thread.sleep(3000); // a few heartbeats: the group is stable
        Map<String, Object> before = assignments(members);
        try (Admin admin = admin(bootstrap)) {
            describe(admin, args.get("group"), "before");
        }
        for (Member m : members) m.events.clear();
        members.get(1).stop = true;
        threads.get(1).join(Common.DEADLINE_MS);
        try (Admin admin = admin(bootstrap)) {
            describe(admin, args.get("group"), "away");
        }
        Properties p = props(args, 1);
        p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args.get("group") + "-instance-1");
        Member back = new Member(1, p, topic);
        members.set(1, back);
        threads.set(1, start(back));
        awaitSplit(members, every, "the static member came back");
        Thread.sleep(3000); // a few heartbeats: nothing else moves
        Map<String, Object> events = new TreeMap<>();
        for (Member m : members) events.put(String.valueOf(m.index), new ArrayList<>(m.events));
        Json.emit("rejoined", "before", before, "after", assignments(members), "events", events);
        try (Admin admin = admin(bootstrap)) {
            describe(admin, args.get("group"), "after");
        }
        for (Member m : members) m.stop = true;
        for (Thread t : threads) t.join(Common.DEADLINE_MS);
    }

    public static void main(String[] argv) throws Exception {
        var args = Common.argMap(argv);
        switch (args.get("scenario")) {
            case "group" -> group(args);
            case "regex" -> regex(args);
            case "static" -> staticMembers(args);
            default -> throw new IllegalArgumentException("unknown scenario " + args.get("scenario"));
        }
    }
}
