package eviction

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: DefaultEvictionHard, want: []string{"memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%", "imagefs.inodesFree<5%"}},
		{in: "pid.available<1000, memory.available<1Gi", want: []string{"pid.available<1k", "memory.available<1Gi"}},
		{in: "", want: nil},
		{in: "memory.available>1Gi", wantErr: true},
		{in: "cpu.available<1", wantErr: true},
		{in: "nodefs.available<120%", wantErr: true},
		{in: "memory.available<-1Mi", wantErr: true},
		{in: "memory.available<1Mi,memory.available<2Mi", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseThresholds(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].String() != tt.want[i] {
					t.Errorf("threshold %d = %s, want %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestPressureFollowsObservations(t *testing.T) {
	thresholds, err := ParseThresholds(DefaultEvictionHard + ",pid.available<100")
	if err != nil {
		t.Fatal(err)
	}
	healthy := Observations{
		SignalMemoryAvailable:  {Available: 1 << 30, Capacity: 8 << 30},
		SignalNodeFsAvailable:  {Available: 50, Capacity: 100},
		SignalNodeFsInodesFree: {Available: 50, Capacity: 100},
		SignalImageFsAvailable: {Available: 50, Capacity: 100},
		SignalPIDAvailable:     {Available: 30000, Capacity: 32768},
	}
	tests := []struct {
		name                   string
		change                 func(Observations)
		memory, disk, pidTight bool
	}{
		{name: "healthy node has no pressure", change: func(Observations) {}},
		{name: "memory below 100Mi", change: func(o Observations) { o[SignalMemoryAvailable] = Observation{Available: 50 << 20, Capacity: 8 << 30} }, memory: true},
		{name: "nodefs below 10%", change: func(o Observations) { o[SignalNodeFsAvailable] = Observation{Available: 9, Capacity: 100} }, disk: true},
		{name: "inodes below 5%", change: func(o Observations) { o[SignalNodeFsInodesFree] = Observation{Available: 4, Capacity: 100} }, disk: true},
		{name: "imagefs below 15%", change: func(o Observations) { o[SignalImageFsAvailable] = Observation{Available: 14, Capacity: 100} }, disk: true},
		{name: "pids below 100", change: func(o Observations) { o[SignalPIDAvailable] = Observation{Available: 99, Capacity: 32768} }, pidTight: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := Observations{}
			for k, v := range healthy {
				obs[k] = v
			}
			tt.change(obs)
			clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
			m := newManager(thresholds, func() (Observations, error) { return obs, nil }, clock)
			if err := m.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if m.IsUnderMemoryPressure() != tt.memory || m.IsUnderDiskPressure() != tt.disk || m.IsUnderPIDPressure() != tt.pidTight {
				t.Errorf("memory/disk/pid pressure = %v/%v/%v, want %v/%v/%v",
					m.IsUnderMemoryPressure(), m.IsUnderDiskPressure(), m.IsUnderPIDPressure(), tt.memory, tt.disk, tt.pidTight)
			}
		})
	}
}

func TestPressureLastsTheTransitionPeriod(t *testing.T) {
	thresholds, _ := ParseThresholds("memory.available<100Mi")
	obs := Observations{SignalMemoryAvailable: {Available: 1 << 20, Capacity: 1 << 30}}
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := newManager(thresholds, func() (Observations, error) { return obs, nil }, clock)
	_ = m.Synchronize()
	obs[SignalMemoryAvailable] = Observation{Available: 1 << 29, Capacity: 1 << 30}
	clock.Step(time.Minute)
	_ = m.Synchronize()
	if !m.IsUnderMemoryPressure() {
		t.Error("pressure cleared one minute after the last low observation")
	}
	clock.Step(DefaultPressureTransitionPeriod)
	if m.IsUnderMemoryPressure() {
		t.Error("pressure still reported after the transition period")
	}
}

func TestObserveReadsTheMachine(t *testing.T) {
	obs, err := Observe(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable} {
		o, ok := obs[s]
		if !ok || o.Capacity <= 0 || o.Available < 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v (present %v)", s, o, ok)
		}
	}
}
