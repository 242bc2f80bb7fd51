package share

import (
	"fmt"
	"sort"
	"strconv"
)

// Group configs (IncrementalAlterConfigs on GROUP resources) that share
// groups read. They are kept in memory on the node that received them
// (docs/kafka.md, "Share groups").
const (
	ConfigAutoOffsetReset = "share.auto.offset.reset"       // latest (default) or earliest
	ConfigLockMs          = "share.record.lock.duration.ms" // acquisition lock
	ConfigIsolation       = "share.isolation.level"         // read_uncommitted (default) or read_committed
	ConfigDeliveryLimit   = "share.delivery.count.limit"    // deliveries before archiving
)

// ConfigDefault returns the default of a supported config, false for one
// PicoMQ does not know.
func (m *Manager) ConfigDefault(name string) (string, bool) {
	switch name {
	case ConfigAutoOffsetReset:
		return "latest", true
	case ConfigLockMs:
		return strconv.FormatInt(m.cfg.Lock.Milliseconds(), 10), true
	case ConfigIsolation:
		return "read_uncommitted", true
	case ConfigDeliveryLimit:
		return strconv.Itoa(int(m.cfg.DeliveryLimit)), true
	}
	return "", false
}

// ConfigNames lists the supported group configs, sorted.
func ConfigNames() []string {
	n := []string{ConfigAutoOffsetReset, ConfigLockMs, ConfigIsolation, ConfigDeliveryLimit}
	sort.Strings(n)
	return n
}

// ValidateConfig checks one value (nil: back to the default).
func ValidateConfig(name string, value *string) error {
	if value == nil {
		return nil
	}
	v := *value
	switch name {
	case ConfigAutoOffsetReset:
		if v != "latest" && v != "earliest" {
			return fmt.Errorf("%s must be latest or earliest, not %q", name, v)
		}
	case ConfigLockMs:
		n, ok := parseInt(v)
		if !ok || n < 1000 || n > 3600000 {
			return fmt.Errorf("%s must be 1000..3600000, not %q", name, v)
		}
	case ConfigIsolation:
		if v != "read_uncommitted" && v != "read_committed" {
			return fmt.Errorf("%s must be read_uncommitted or read_committed, not %q", name, v)
		}
	case ConfigDeliveryLimit:
		n, ok := parseInt(v)
		if !ok || n < 2 || n > 10 {
			return fmt.Errorf("%s must be 2..10, not %q", name, v)
		}
	default:
		return fmt.Errorf("group config %s is not supported by PicoMQ", name)
	}
	return nil
}

// SetConfigs replaces group's explicitly set configs (validated by the
// caller with ValidateConfig); a nil value removes one.
func (m *Manager) SetConfigs(group string, set map[string]*string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.configs[group]
	if c == nil {
		c = map[string]string{}
		m.configs[group] = c
	}
	for k, v := range set {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = *v
	}
}

// Configs returns group's explicitly set configs (a copy).
func (m *Manager) Configs(group string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.configs[group] {
		out[k] = v
	}
	return out
}

func parseInt(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
