package main

import (
	"maps"
	"testing"
)

func TestUnreadLogLevels(t *testing.T) {
	off := map[string]string{"TF_LOG_SDK": "off", "TF_LOG_PROVIDER_FEDIVERSITY": "off"}
	for _, c := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"no log asked for: both off", map[string]string{}, off},
		{"TF_LOG=off is no log", map[string]string{"TF_LOG": "OFF"}, off},
		{"TF_LOG_CORE shows no provider log", map[string]string{"TF_LOG_CORE": "TRACE"}, off},
		{"TF_LOG asks: untouched", map[string]string{"TF_LOG": "DEBUG"}, nil},
		{"TF_LOG=JSON asks: untouched", map[string]string{"TF_LOG": "JSON"}, nil},
		{"TF_LOG_PROVIDER asks: untouched", map[string]string{"TF_LOG_PROVIDER": "info"}, nil},
		{"a level set by hand stays", map[string]string{"TF_LOG_SDK": "trace"}, map[string]string{"TF_LOG_PROVIDER_FEDIVERSITY": "off"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := unreadLogLevels(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if len(got) != len(c.want) || !maps.Equal(got, c.want) {
				t.Fatalf("env %v: set %v, want %v", c.env, got, c.want)
			}
		})
	}
}
