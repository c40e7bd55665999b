import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The test programs' output: one JSON object per line on stdout, which the pytest side parses.
 * byte[] values are written as base64 strings (keys, values and header values are compared byte
 * for byte), null as null. Written by hand: the clients-legacy classpath has no JSON library.
 */
final class Json {
    private Json() {}

    /** A JSON object of alternating keys and values, in order. */
    static Map<String, Object> obj(Object... keysAndValues) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            out.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return out;
    }

    /** Print one event line: {"event": name, ...}. */
    static void emit(String event, Object... keysAndValues) {
        Object[] all = new Object[keysAndValues.length + 2];
        all[0] = "event";
        all[1] = event;
        System.arraycopy(keysAndValues, 0, all, 2, keysAndValues.length);
        String line = write(obj(all));
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value);
        return sb.toString();
    }

    private static void write(StringBuilder sb, Object value) {
        if (value == null) {
            sb.append("null");
        } else if (value instanceof byte[]) {
            string(sb, Base64.getEncoder().encodeToString((byte[]) value));
        } else if (value instanceof Number || value instanceof Boolean) {
            sb.append(value);
        } else if (value instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (value instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) value) {
                if (!first) sb.append(',');
                first = false;
                write(sb, item);
            }
            sb.append(']');
        } else if (value instanceof Object[]) {
            List<Object> items = new ArrayList<>();
            for (Object item : (Object[]) value) items.add(item);
            write(sb, items);
        } else {
            string(sb, value.toString());
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        sb.append('"');
    }
}
