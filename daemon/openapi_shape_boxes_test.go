package daemon_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes"
	"github.com/chalupa-run/chalupa/internal/apischema"
)

// shapeKey is a valid SSH key fingerprint whose last byte is i.
func shapeKey(i int) string {
	return fmt.Sprintf("00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:%02x", i)
}

// shapeList is n values of f(i).
func shapeList(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// createBox is a valid create-box body of box name in "shape-check" with
// the keys of set replaced (a nil value removes the key).
func createBox(name string, set map[string]any) []byte {
	b := map[string]any{"name": name, "environment": "shape-check", "region": "nyc3", "size": "s-1vcpu-1gb",
		"image": "ubuntu-24-04-x64", "sshKeyFingerprints": []string{shapeKey(0)},
		"customerSource": "203.0.113.7/32", "controlPlaneSource": "198.51.100.7/32"}
	for k, v := range set {
		if v == nil {
			delete(b, k)
			continue
		}
		b[k] = v
	}
	raw, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return raw
}

// patch is an update-box body of one key.
func patch(key string, v any) []byte {
	raw, err := json.Marshal(map[string]any{key: v})
	if err != nil {
		panic(err)
	}
	return raw
}

// The create-box and update-box bodies (docs/operations.md, "Boxes"):
// each rule their schema tags declare is broken by a row alone, and the
// edges are accepted. The accepted create comes first: the update rows
// change that box.
var _ = registerShapes("boxes", func(e *shapeEnv) []shapeCase {
	const box = "box-shape-a"
	upd := adminapi.OpUpdateBox
	boxPath := "/api/admin/boxes/" + box
	create := func(name string, set map[string]any, status int) shapeCase {
		code := ""
		if status != 0 {
			code = "invalid_box"
		}
		return shapeCase{"create " + name, adminapi.OpCreateBox, "", createBox("box-shape-x", set), status, code}
	}
	update := func(name, key string, v any, status int) shapeCase {
		code := ""
		if status != 0 {
			code = "invalid_box"
		}
		return shapeCase{"update " + name, upd, boxPath, patch(key, v), status, code}
	}
	ten := shapeList(boxes.MaxSSHKeys, shapeKey)
	twenty := shapeList(boxes.MaxTags, func(i int) string { return fmt.Sprintf("t%d", i) })
	twenty[0], twenty[1], twenty[2], twenty[3] = "chalup", "x-chalupa", "Team:ML_7", strings.Repeat("a", 64)
	return []shapeCase{
		// Accepted at the edges, the box the updates change among them.
		{"create at the edges", adminapi.OpCreateBox, "", createBox(box, map[string]any{
			"region": "ams3", "size": "s" + strings.Repeat("-", 63), "image": "123456789", "sshKeyFingerprints": ten, "tags": twenty,
			"customerSource": "10.1.2.3/32", "controlPlaneSource": "223.255.255.255/32",
			"volumeSizeGiB": 0, "agentIdleMinutes": 1, "agentSessionMinutes": 0}), 0, ""},
		{"create beside the reserved ranges", adminapi.OpCreateBox, "", createBox("box-shape-b", map[string]any{
			"image": "a" + strings.Repeat("._-", 21), "customerSource": "126.255.255.255/32", "controlPlaneSource": "169.253.0.1/32",
			"tags": []string{}}), 0, ""},
		{"create beside the reserved ranges, above", adminapi.OpCreateBox, "", createBox("box-shape-c", map[string]any{
			"customerSource": "128.0.0.0/32", "controlPlaneSource": "240.0.0.1/32", "managed": true, "agent": false}), 0, ""},

		create("without environment", map[string]any{"environment": nil}, 422),
		create("with a bad environment slug", map[string]any{"environment": "Shape_Check"}, 422),
		create("without region", map[string]any{"region": nil}, 422),
		create("with a long region", map[string]any{"region": "new-york"}, 422),
		create("with an upper-case region", map[string]any{"region": "NYC3"}, 422),
		create("without size", map[string]any{"size": nil}, 422),
		create("with a space in size", map[string]any{"size": "S 2"}, 422),
		create("with a 65-character size", map[string]any{"size": "s" + strings.Repeat("-", 64)}, 422),
		create("without image", map[string]any{"image": nil}, 422),
		create("with an empty image", map[string]any{"image": ""}, 422),
		create("with an upper-case image", map[string]any{"image": "Ubuntu"}, 422),
		create("without SSH keys", map[string]any{"sshKeyFingerprints": nil}, 422),
		create("with an empty SSH key list", map[string]any{"sshKeyFingerprints": []string{}}, 422),
		create("with 11 SSH keys", map[string]any{"sshKeyFingerprints": shapeList(boxes.MaxSSHKeys+1, shapeKey)}, 422),
		create("with a repeated SSH key", map[string]any{"sshKeyFingerprints": []string{shapeKey(1), shapeKey(1)}}, 422),
		create("with a SHA256 SSH key", map[string]any{"sshKeyFingerprints": []string{"SHA256:abc"}}, 422),
		create("with an upper-case SSH key", map[string]any{"sshKeyFingerprints": []string{strings.ToUpper(shapeKey(10))}}, 422),
		create("without customerSource", map[string]any{"customerSource": nil}, 422),
		create("without controlPlaneSource", map[string]any{"controlPlaneSource": nil}, 422),
		create("with a /24 source", map[string]any{"customerSource": "203.0.113.0/24"}, 422),
		create("with a source without prefix", map[string]any{"customerSource": "203.0.113.7"}, 422),
		create("with a source with a leading zero", map[string]any{"customerSource": "203.000.113.7/32"}, 422),
		create("with an IPv6 source", map[string]any{"controlPlaneSource": "2001:db8::1/128"}, 422),
		create("with the unspecified source", map[string]any{"customerSource": "0.0.0.0/32"}, 422),
		create("with a loopback source", map[string]any{"controlPlaneSource": "127.0.0.1/32"}, 422),
		create("with a link-local source", map[string]any{"customerSource": "169.254.1.1/32"}, 422),
		create("with a multicast source", map[string]any{"customerSource": "239.255.255.255/32"}, 422),
		create("with the broadcast source", map[string]any{"customerSource": "255.255.255.255/32"}, 422),
		create("with 21 tags", map[string]any{"tags": shapeList(boxes.MaxTags+1, func(i int) string { return fmt.Sprintf("t%d", i) })}, 422),
		create("with a repeated tag", map[string]any{"tags": []string{"a", "a"}}, 422),
		create("with a space in a tag", map[string]any{"tags": []string{"a b"}}, 422),
		create("with a 65-character tag", map[string]any{"tags": []string{strings.Repeat("a", 65)}}, 422),
		create("with an empty tag", map[string]any{"tags": []string{""}}, 422),
		create("with a reserved tag", map[string]any{"tags": []string{"chalupa:env:other"}}, 422),
		create("with a reserved tag in another case", map[string]any{"tags": []string{"ok", "ChaLupa-x"}}, 422),
		create("with a negative agentIdleMinutes", map[string]any{"agentIdleMinutes": -1}, 422),
		create("with a negative agentSessionMinutes", map[string]any{"agentSessionMinutes": -1}, 422),

		update("with nothing", "managed", true, 0),
		update("region", "region", "sfo3", 0),
		update("to ten SSH keys", "sshKeyFingerprints", ten, 0),
		update("to no tags", "tags", []string{}, 0),
		update("to twenty tags", "tags", twenty, 0),
		update("source", "customerSource", "198.51.100.200/32", 0),
		update("volume to the largest", "volumeSizeGiB", boxes.MaxVolumeGiB, 0),
		update("volume to none", "volumeSizeGiB", 0, 0),
		update("agentIdleMinutes to one minute", "agentIdleMinutes", 1, 0),
		update("agentIdleMinutes to a week", "agentIdleMinutes", boxes.MaxAgentIdleMinutes, 0),
		update("agentSessionMinutes to 30 days", "agentSessionMinutes", boxes.MaxAgentSessionMinutes, 0),
		update("agentSessionMinutes to none", "agentSessionMinutes", 0, 0),

		update("with an empty region", "region", "", 422),
		update("with a bad region", "region", "nyc", 422),
		update("with an empty size", "size", "", 422),
		update("with a bad size", "size", "-s", 422),
		update("with an upper-case image", "image", "UBUNTU", 422),
		update("with no SSH keys", "sshKeyFingerprints", []string{}, 422),
		update("with 11 SSH keys", "sshKeyFingerprints", shapeList(boxes.MaxSSHKeys+1, shapeKey), 422),
		update("with a repeated SSH key", "sshKeyFingerprints", []string{shapeKey(2), shapeKey(2)}, 422),
		update("with a bad SSH key", "sshKeyFingerprints", []string{"aa:bb"}, 422),
		update("with an empty source", "customerSource", "", 422),
		update("with a /8 source", "customerSource", "10.0.0.0/8", 422),
		update("with a link-local source", "customerSource", "169.254.0.1/32", 422),
		update("with a source without prefix", "controlPlaneSource", "198.51.100.7", 422),
		update("with a loopback source", "controlPlaneSource", "127.255.255.254/32", 422),
		update("with a multicast source", "controlPlaneSource", "224.0.0.1/32", 422),
		update("with 21 tags", "tags", shapeList(boxes.MaxTags+1, func(i int) string { return fmt.Sprintf("t%d", i) }), 422),
		update("with a repeated tag", "tags", []string{"b", "b"}, 422),
		update("with a bad tag", "tags", []string{"a/b"}, 422),
		update("with a reserved tag", "tags", []string{"CHALUPA"}, 422),
		update("with a negative volume", "volumeSizeGiB", -1, 422),
		update("with a volume above 16 TiB", "volumeSizeGiB", boxes.MaxVolumeGiB+1, 422),
		update("with agentIdleMinutes 0", "agentIdleMinutes", 0, 422),
		update("with agentIdleMinutes above a week", "agentIdleMinutes", boxes.MaxAgentIdleMinutes+1, 422),
		update("with a negative agentSessionMinutes", "agentSessionMinutes", -1, 422),
		update("with agentSessionMinutes above 30 days", "agentSessionMinutes", boxes.MaxAgentSessionMinutes+1, 422),
		{"update an unknown box with a bad region", upd, "/api/admin/boxes/box-shape-none", patch("region", "x"), 422, "invalid_box"},
	}
})

// TestBoxTagsAreTheConstants: the box bodies' schema tags say the bounds
// boxes.Validate keeps (docs/operations.md, "Boxes"), and the update body
// declares each field as the create body does: the same rules, optional,
// except that agentIdleMinutes starts at 1 (0 is the create default).
func TestBoxTagsAreTheConstants(t *testing.T) {
	rules := func(typ reflect.Type) map[string]apischema.Rules {
		out := map[string]apischema.Rules{}
		for _, f := range apischema.Fields(typ) {
			out[f.Name] = f.Rules
		}
		return out
	}
	create, update := rules(reflect.TypeFor[adminapi.BoxConfig]()), rules(reflect.TypeFor[adminapi.UpdateBoxRequest]())
	for field, max := range map[string]int64{
		"volumeSizeGiB": boxes.MaxVolumeGiB, "agentIdleMinutes": boxes.MaxAgentIdleMinutes, "agentSessionMinutes": boxes.MaxAgentSessionMinutes,
	} {
		t.Run(field, func(t *testing.T) {
			if r := create[field]; r.Minimum == nil || *r.Minimum != 0 || r.Maximum == nil || *r.Maximum != max {
				t.Fatalf("%s tag %v..%v; want 0..%d", field, r.Minimum, r.Maximum, max)
			}
		})
	}
	for field, max := range map[string]int{"sshKeyFingerprints": boxes.MaxSSHKeys, "tags": boxes.MaxTags} {
		t.Run(field, func(t *testing.T) {
			if r := create[field]; r.MaxItems != max || !r.UniqueItems {
				t.Fatalf("%s tag maxItems %d unique %v; want %d distinct", field, r.MaxItems, r.UniqueItems, max)
			}
		})
	}
	for field, c := range create {
		t.Run("update "+field, func(t *testing.T) {
			u, ok := update[field]
			if !ok {
				t.Fatalf("the update body has no %s", field)
			}
			want := c
			want.Required = false
			if field == "agentIdleMinutes" {
				one, oneF := int64(1), float64(1)
				want.Minimum, want.MinFloat = &one, &oneF
			}
			if !reflect.DeepEqual(u, want) {
				t.Fatalf("update tag %+v; create's %+v", u, c)
			}
		})
	}
}
