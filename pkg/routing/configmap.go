package routing

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConfigMap layout shared by the operator (writer) and the interceptors (readers).
const (
	// DefaultBaseName is the head ConfigMap's name unless configured otherwise.
	DefaultBaseName = "httpscale-routing-table"
	// LabelTable is set to the base name on the head and on every shard ConfigMap, so one informer
	// with the selector LabelTable=<base> sees all of them.
	LabelTable = "httpscale.dev/routing-table"
	// AnnotationVersion on the head ConfigMap shows the table version for humans (kubectl).
	AnnotationVersion = "httpscale.dev/routing-table-version"
	// ManifestKey is the head ConfigMap's data key holding the Manifest as JSON.
	ManifestKey = "manifest.json"
	// EntriesKey is the shard ConfigMaps' binaryData key holding a Shard's Data.
	EntriesKey = "entries.json.gz"

	shardHashLen = 10
)

// ShardConfigMapName is the name of the ConfigMap holding ref: "<base>-<first 10 hex of the shard's
// SHA-256>-<shard name>". The name is content-addressed, so a name always holds the same bytes: a
// writer never rewrites a shard in place, unchanged shards keep their ConfigMap across versions, and a
// head can never point at a shard of another version.
func ShardConfigMapName(base string, ref ShardRef) string {
	sum := ref.SHA256
	if len(sum) > shardHashLen {
		sum = sum[:shardHashLen]
	}
	return base + "-" + sum + "-" + ref.Name
}

// ToConfigMaps lays out an encoded table as ConfigMaps in namespace: the head, named base, holding the
// manifest under ManifestKey, and one immutable ConfigMap per shard (named by ShardConfigMapName)
// holding its data under EntriesKey in binaryData. All carry the label LabelTable=base.
//
// Write order, so that a reader never sees a head pointing at missing or mixed shards:
//
//  1. Create every shard ConfigMap; AlreadyExists is success (the name fixes the content).
//  2. Create or update the head — the atomic switch to the new table.
//  3. Only after the head is written, delete the ConfigMaps labelled LabelTable=base other than the
//     head and the shards just returned; they belong to older tables.
//
// Readers that watch all of them with one informer (one label selector, so events arrive in write
// order) then see new shards before the head that references them. If a reader still finds a shard
// missing (a cache out of step, a writer that died between steps), FromConfigMaps reports
// ErrIncomplete and the reader keeps its last good table until the next event.
//
// ToConfigMaps does not validate base; it must be a DNS subdomain of at most 236 characters so that
// shard names fit. Cost: copies no shard data (the ConfigMaps alias Shard.Data).
func ToConfigMaps(namespace, base string, m Manifest, shards []Shard) (head *corev1.ConfigMap, shardCMs []*corev1.ConfigMap) {
	// A Manifest holds only strings, ints and slices of them: encoding cannot fail.
	manifest, _ := json.Marshal(m)
	labels := func() map[string]string { return map[string]string{LabelTable: base} }
	head = &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        base,
			Namespace:   namespace,
			Labels:      labels(),
			Annotations: map[string]string{AnnotationVersion: m.Version},
		},
		Data: map[string]string{ManifestKey: string(manifest)},
	}
	immutable := true
	for _, s := range shards {
		ref := ShardRef{Name: s.Name, SHA256: s.SHA256, Entries: s.Entries}
		shardCMs = append(shardCMs, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ShardConfigMapName(base, ref),
				Namespace: namespace,
				Labels:    labels(),
			},
			Immutable:  &immutable,
			BinaryData: map[string][]byte{EntriesKey: s.Data},
		})
	}
	return head, shardCMs
}

// FromConfigMaps decodes the table the head ConfigMap describes, taking its shards from shardCMs
// (typically every ConfigMap labelled LabelTable=<base>; the head itself and shards of other versions
// are ignored). A nil head or a missing shard is ErrIncomplete; anything inconsistent is ErrCorrupt
// (see Decode). Cost: as Decode; not for the hot path (a reader following the table uses
// Reader.FromConfigMaps). Safe for concurrent use.
func FromConfigMaps(head *corev1.ConfigMap, shardCMs []*corev1.ConfigMap) (*Table, error) {
	var r Reader
	return r.FromConfigMaps(head, shardCMs)
}

// ReadManifest returns the validated manifest of a head ConfigMap. A nil head is ErrIncomplete;
// a missing, malformed or inconsistent manifest is ErrCorrupt.
func ReadManifest(head *corev1.ConfigMap) (Manifest, error) {
	if head == nil {
		return Manifest{}, fmt.Errorf("reading routing table: %w: no head ConfigMap", ErrIncomplete)
	}
	var m Manifest
	raw, ok := head.Data[ManifestKey]
	if !ok {
		return Manifest{}, fmt.Errorf("reading routing table %s/%s: %w: no %s", head.Namespace, head.Name, ErrCorrupt, ManifestKey)
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return Manifest{}, fmt.Errorf("reading routing table %s/%s: %w: %s: %w", head.Namespace, head.Name, ErrCorrupt, ManifestKey, err)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, fmt.Errorf("reading routing table %s/%s: %w", head.Namespace, head.Name, err)
	}
	return m, nil
}

// FromConfigMaps is the package's FromConfigMaps for a Reader: it decodes only the shards that
// changed since the table it last returned (see Reader.Read).
func (r *Reader) FromConfigMaps(head *corev1.ConfigMap, shardCMs []*corev1.ConfigMap) (*Table, error) {
	m, err := ReadManifest(head)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*corev1.ConfigMap, len(shardCMs))
	for _, cm := range shardCMs {
		if cm != nil && cm.Namespace == head.Namespace {
			byName[cm.Name] = cm
		}
	}
	refs := make(map[string]ShardRef, len(m.Shards))
	for _, ref := range m.Shards {
		refs[ref.Name] = ref
	}
	t, err := r.Read(m, func(name string) ([]byte, bool, error) {
		cm, ok := byName[ShardConfigMapName(head.Name, refs[name])]
		if !ok {
			return nil, false, nil
		}
		data, ok := cm.BinaryData[EntriesKey]
		if !ok {
			return nil, false, fmt.Errorf("%w: ConfigMap %s has no binaryData %s", ErrCorrupt, cm.Name, EntriesKey)
		}
		return data, true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading routing table %s/%s: %w", head.Namespace, head.Name, err)
	}
	return t, nil
}
