package jobenv

import (
	"reflect"
	"testing"
)

func ip(v int) *int { return &v }

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Env
	}{
		{"none", map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, Env{}},
		{"torchrun", map[string]string{"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "r"},
			Env{Rank: ip(9), RankFrom: "RANK", WorldSize: ip(16), WorldSizeFrom: "WORLD_SIZE", LocalRank: ip(1), JobID: "r"}},
		{"RANK wins over the launcher's own", map[string]string{"RANK": "1", "SLURM_PROCID": "0", "SLURM_JOB_ID": "7"},
			Env{Rank: ip(1), RankFrom: "RANK", JobID: "7"}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3"},
			Env{Rank: ip(3), RankFrom: "OMPI_COMM_WORLD_RANK", WorldSize: ip(4), WorldSizeFrom: "OMPI_COMM_WORLD_SIZE", LocalRank: ip(3)}},
		{"negative and malformed values are skipped", map[string]string{"RANK": "-1", "SLURM_PROCID": " 2 ", "WORLD_SIZE": "eight"},
			Env{Rank: ip(2), RankFrom: "SLURM_PROCID"}},
		{"torchrun's default run id names no job", map[string]string{"RANK": "0", "TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "8"},
			Env{Rank: ip(0), RankFrom: "RANK", JobID: "8"}},
		{"indexed job", map[string]string{"JOB_COMPLETION_INDEX": "0"}, Env{Rank: ip(0), RankFrom: "JOB_COMPLETION_INDEX"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Parse(tt.env)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			if got.Empty() != reflect.DeepEqual(tt.want, Env{}) {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
}
