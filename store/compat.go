package store

import "strings"

// Reading files written before a typed value existed beside its words.
//
// Some records keep a reason both in words, for people, and as a typed
// value, for code that decides from it (a Python status, the kind of a
// device-mapping reason). Files written before the typed value existed
// have only the words. This file is the one place that reads those
// words: each reader fills the typed value in from them once, as the
// record is read, so nothing past the store ever decides from a
// sentence. The phrases matched are those earlier recorders wrote, and
// stay as they were: a new recorder writes the typed value itself.

// upgradeProcess fills in the typed values a process record of an older
// file lacks.
func upgradeProcess(p *Process) {
	if py := p.Python; py != nil && py.Error != "" && py.ErrorKind == "" {
		py.ErrorKind = legacyPyError(py.Error)
	}
	for i := range p.Devices {
		if d := &p.Devices[i]; d.Why != "" && d.WhyKind == "" {
			d.WhyKind = legacyDeviceWhy(d.Why)
		}
	}
}

// upgradeNamed fills in the Python status a named stack of an older file
// lacks.
func upgradeNamed(n *NamedStack) {
	if n.Python != "" && n.PythonStatus == "" {
		n.PythonStatus = legacyPyStatus(n.Python)
	}
}

// legacyPyError is the kind of an interpreter's Error as older recorders
// wrote it: only an interpreter never located said "was not located"; a
// failure to tell the probes was not told apart from an unsupported
// build, and reads as one.
func legacyPyError(why string) PyError {
	if strings.Contains(why, "was not located") {
		return PyUnlocated
	}
	return PyUnsupported
}

// legacyPyStatus is the status of a named stack's Python frames as older
// recorders wrote it: a status word, or "not read: " / "unreadable: "
// followed by the reason.
func legacyPyStatus(status string) PyStatus {
	switch {
	case strings.HasPrefix(status, "not read: "):
		if legacyPyError(strings.TrimPrefix(status, "not read: ")) == PyUnlocated {
			return PyNotLocated
		}
		return PyNotRead
	case strings.HasPrefix(status, "unreadable: "):
		return PyUnreadable
	}
	return PyStatus(status)
}

// legacyDeviceWhy is the kind of a device-mapping reason as older
// recorders wrote it: each kind's reasons began with the variable or
// fact they were about.
func legacyDeviceWhy(why string) DeviceWhy {
	switch {
	case strings.HasPrefix(why, "NVIDIA_VISIBLE_DEVICES"):
		return WhyContainerVisible
	case strings.HasPrefix(why, "NVML listed no GPUs"):
		return WhyNoGPUs
	case strings.HasPrefix(why, "GPU ") && strings.Contains(why, "has MIG enabled"):
		return WhyMIGInstance
	case strings.HasPrefix(why, "CUDA_VISIBLE_DEVICES"), strings.HasPrefix(why, "ordinal ") && strings.Contains(why, "CUDA_VISIBLE_DEVICES"):
		return WhyCUDAVisible
	}
	return WhyOrder
}
