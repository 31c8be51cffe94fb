package etcd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
)

func TestParseURL(t *testing.T) {
	u, err := baton.ParseURL("etcd://app:pw@10.0.0.1:2379,10.0.0.2:2379/jobs/?ttl=10s&request-timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	cc, opts, err := etcd.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cc.Endpoints, ","); got != "http://10.0.0.1:2379,http://10.0.0.2:2379" {
		t.Errorf("endpoints %s", got)
	}
	if cc.Username != "app" || cc.Password != "pw" {
		t.Errorf("credentials %q/%q", cc.Username, cc.Password)
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 10*time.Second || cfg.RequestTimeout != 2*time.Second || cfg.Prefix != "/jobs/" {
		t.Errorf("options from the URL not applied: ttl %v, request timeout %v, prefix %q", cfg.TTL, cfg.RequestTimeout, cfg.Prefix)
	}

	for _, bad := range []string{"etcd://", "etcd://host", "etcd://h:1,,h:2", "etcd://[::1]", "etcd://a:1,b:xyz", "etcd://a:1,[::1]", "etcd://h:1:2,a:1", "etcd://a:0", "etcd://a:+1", "etcd://h:1?ttl=ten", "etcd://h:1?ttl=0", "etcd://h:1?drift=-1ms", "etcd://h:1?colour=red", "etcd://h:1?ttl=5s&ttl=6s", "etcd://h:1/app?ttl=5s;drift=1s", "etcd://h:1/app?ttl=5%", "etcd://h:1/app#x", "etcd:opaque", "etcd://app@h:1", "etcd://app:@h:1", "etcd://:pw@h:1"} {
		u, err := baton.ParseURL(bad)
		if err == nil {
			_, _, err = etcd.ParseURL(u)
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"etcd://127.0.0.1:2379", "etcd://a:1,b:2/p/?ttl=5s", "etcd://u:p@h:1", "etcd://h:1?renew-every=1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := baton.ParseURL(s)
		if err != nil {
			return
		}
		_, _, err = etcd.ParseURL(u)
		if err != nil {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Fatalf("error %v is not an option error", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
		}
	})
}
