package judge

import "time"

// JobTracker remembers when this run first saw each job, because systemd publishes no
// job creation time: a job's age is how long the run has seen it.
type JobTracker struct{ FirstSeen map[int]time.Time }

func (j *JobTracker) Observe(jobs []Job, at time.Time) {
	if j.FirstSeen == nil {
		j.FirstSeen = map[int]time.Time{}
	}
	for _, job := range jobs {
		if _, ok := j.FirstSeen[job.ID]; !ok {
			j.FirstSeen[job.ID] = at
		}
	}
}
