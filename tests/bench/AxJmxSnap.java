/*
 * AxJmxSnap — one snapshot of a Kafka broker's request counters over JMX,
 * for tests/bench/broker_requests.sh (compiled there into a scratch
 * directory; never committed as a binary). Prints one line per counter:
 *
 *   req <ApiKey> <count>        kafka.network:type=RequestMetrics,
 *                               name=RequestsPerSec,request=<ApiKey>
 *                               (summed over the version tag)
 *   msgs_in <count>             BrokerTopicMetrics MessagesInPerSec (all topics)
 *   bytes_in <count>            BrokerTopicMetrics BytesInPerSec
 *   bytes_out <count>           BrokerTopicMetrics BytesOutPerSec (served to fetches)
 *   cpu_ns <ns>                 the broker JVM's ProcessCpuTime
 *   mono_ns <ns>                this program's System.nanoTime() (the clock)
 *
 * Usage: java AxJmxSnap HOST:PORT
 */
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public final class AxJmxSnap {
    private static long count(MBeanServerConnection c, String name) throws Exception {
        Set<ObjectName> names = c.queryNames(new ObjectName(name), null);
        long sum = 0;
        for (ObjectName n : names)
            sum += ((Number) c.getAttribute(n, "Count")).longValue();
        return sum;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: AxJmxSnap HOST:PORT");
            System.exit(2);
        }
        JMXServiceURL url =
            new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector jc = JMXConnectorFactory.connect(url, null)) {
            MBeanServerConnection c = jc.getMBeanServerConnection();
            Map<String, Long> req = new TreeMap<>();
            for (ObjectName n : c.queryNames(
                     new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"),
                     null)) {
                String api = n.getKeyProperty("request");
                long v = ((Number) c.getAttribute(n, "Count")).longValue();
                req.merge(api, v, Long::sum);
            }
            /* responses with an error, by API key and error name (NONE left
             * out): CONCURRENT_TRANSACTIONS on AddPartitionsToTxn is a
             * transaction begun before the previous one's markers were
             * written, which librdkafka retries after 20 ms */
            Map<String, Long> errs = new TreeMap<>();
            for (ObjectName n : c.queryNames(
                     new ObjectName("kafka.network:type=RequestMetrics,name=ErrorsPerSec,*"),
                     null)) {
                String e = n.getKeyProperty("error");
                if (e == null || e.equals("NONE"))
                    continue;
                long v = ((Number) c.getAttribute(n, "Count")).longValue();
                errs.merge(n.getKeyProperty("request") + ":" + e, v, Long::sum);
            }
            StringBuilder out = new StringBuilder();
            for (Map.Entry<String, Long> e : req.entrySet())
                out.append("req ").append(e.getKey()).append(' ').append(e.getValue()).append('\n');
            for (Map.Entry<String, Long> e : errs.entrySet())
                out.append("err ").append(e.getKey()).append(' ').append(e.getValue()).append('\n');
            out.append("msgs_in ")
                .append(count(c, "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"))
                .append('\n');
            out.append("bytes_in ")
                .append(count(c, "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec"))
                .append('\n');
            out.append("bytes_out ")
                .append(count(c, "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec"))
                .append('\n');
            Object cpu = c.getAttribute(new ObjectName("java.lang:type=OperatingSystem"),
                                        "ProcessCpuTime");
            out.append("cpu_ns ").append(((Number) cpu).longValue()).append('\n');
            out.append("mono_ns ").append(System.nanoTime()).append('\n');
            System.out.print(out);
        }
    }
}
