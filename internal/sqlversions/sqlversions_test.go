package sqlversions

import (
	"testing"
	"testing/fstest"
)

func TestList(t *testing.T) {
	tests := []struct {
		name    string
		files   []string
		want    []int
		wantErr bool
	}{
		{"sorted by number, not name", []string{"d/010_b.sql", "d/002_a.sql", "d/001_z.sql"}, []int{1, 2, 10}, false},
		{"templates and other files skipped", []string{"d/001_a.sql", "d/shard_template.sql", "d/002_b.txt", "d/x_1.sql"}, []int{1}, false},
		{"duplicate version", []string{"d/001_a.sql", "d/0001_b.sql"}, nil, true},
		{"empty", []string{"d/readme.md"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tt.files {
				fsys[f] = &fstest.MapFile{Data: []byte("SELECT 1")}
			}
			got, err := List(fsys, "d")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want versions %v", got, tt.want)
			}
			for i, f := range got {
				if f.Version != tt.want[i] || f.Path != "d/"+f.Name {
					t.Fatalf("got[%d] = %+v, want version %d", i, f, tt.want[i])
				}
			}
		})
	}
}
