package cuda

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// wantFamilies are the allocation, mapping, release and context families
// the recorder must trace: every one must have at least one row.
var wantFamilies = []string{
	"cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
	"cuMemCreate", "cuMemPoolCreate", "cuArrayCreate", "cuArray3DCreate", "cuMipmappedArrayCreate",
	"cuMemAllocHost", "cuMemHostAlloc",
	"cuMemHostRegister", "cuMemHostGetDevicePointer", "cuMemAddressReserve", "cuMemMap", "cuMemMapArrayAsync",
	"cuMemSetAccess", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle", "cuMemPoolImportPointer",
	"cuIpcOpenMemHandle", "cuCtxEnablePeerAccess", "cuImportExternalMemory", "cuExternalMemoryGetMappedBuffer",
	"cuGraphicsMapResources",
	"cuMemFree", "cuMemFreeHost", "cuMemFreeAsync", "cuMemHostUnregister", "cuMemRelease", "cuMemUnmap",
	"cuMemAddressFree", "cuIpcCloseMemHandle", "cuCtxDisablePeerAccess", "cuArrayDestroy", "cuMemPoolDestroy",
	"cuDestroyExternalMemory", "cuGraphicsUnmapResources",
	"cuInit", "cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
	"cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuDeviceGet", "cuDeviceGetUuid", "cuDeviceGetPCIBusId",
}

func TestTableCoversFamilies(t *testing.T) {
	have := map[string]bool{}
	for _, f := range Families() {
		have[f] = true
	}
	for _, f := range wantFamilies {
		if !have[f] {
			t.Errorf("family %s has no row", f)
		}
	}
}

func TestTableRows(t *testing.T) {
	seen := map[string]bool{}
	for i, s := range Symbols {
		if seen[s.Name] {
			t.Errorf("%s listed twice", s.Name)
		}
		seen[s.Name] = true
		if _, id, ok := Lookup(s.Name); !ok || id != i {
			t.Errorf("Lookup(%s) = %d, %v", s.Name, id, ok)
		}
		if fam, ok := FamilyOf(s.Name); !ok || fam != s.Family {
			t.Errorf("FamilyOf(%s) = %q, want %q", s.Name, fam, s.Family)
		}
		if s.Op == OpFree && len(s.Releases) == 0 && s.Family != "cuGraphicsUnmapResources" {
			t.Errorf("%s releases nothing", s.Name)
		}
		if s.Creates != ResNone && s.Ptr.Src == SrcNone {
			t.Errorf("%s creates a %s but has no pointer to key it by", s.Name, s.Creates)
		}
		for _, c := range []Capture{s.In, s.OutA} {
			if c.Len > 32 {
				t.Errorf("%s captures %d bytes, the record holds 32", s.Name, c.Len)
			}
		}
		if s.OutB.Len > 8 {
			t.Errorf("%s second out pointer of %d bytes", s.Name, s.OutB.Len)
		}
	}
}

// unhooked535 are the calls of the memory and context families that
// driver 535 exports and the table has no row for: COVERAGE lists them.
// A row added for one of them, or a call the table newly treats as quiet,
// changes this list on purpose.
var unhooked535 = []string{
	"cuCtxAttach", "cuCtxDetach", "cuCtxSetLimit", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2",
	"cuExternalMemoryGetMappedMipmappedArray", "cuGraphicsEGLRegisterImage", "cuGraphicsGLRegisterBuffer",
	"cuGraphicsGLRegisterImage", "cuGraphicsUnregisterResource", "cuGraphicsVDPAURegisterOutputSurface",
	"cuGraphicsVDPAURegisterVideoSurface", "cuMemGetHandleForAddressRange", "cuMemPoolExportToShareableHandle",
	"cuMemPoolImportFromShareableHandle", "cuMemPoolSetAccess", "cuMemPoolTrimTo", "cuMemRetainAllocationHandle",
	"cuMulticastAddDevice", "cuMulticastBindAddr", "cuMulticastBindMem", "cuMulticastCreate", "cuMulticastUnbind",
}

// realExports returns the exported function names of a libcuda file.
func realExports(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			name, _, _ := strings.Cut(s.Name, "@")
			out[name] = true
		}
	}
	return out
}

// NVIDIA's real libcuda of two driver versions is the reference for what
// exists: every variant of a family of the table has a row, and the calls
// of the memory and context families without a row are exactly the ones
// known (driver 550 adds only cuCtxFromGreenCtx's, cuGreenCtxCreate's and
// cuGreenCtxDestroy's, which have rows).
func TestRealLibCUDAMemoryAndContextCallsKnown(t *testing.T) {
	tests := []struct {
		dir, driver string
		rows        []string // rows the version must export
		unhooked    []string
	}{
		{"nvidia", "535", []string{"cuMemAlloc_v2", "cuCtxCreate_v3", "cuMemCreate"}, unhooked535},
		{"nvidia550", "550", []string{"cuMemAlloc_v2", "cuCtxCreate_v3", "cuGreenCtxCreate", "cuGreenCtxDestroy", "cuCtxFromGreenCtx"}, unhooked535},
	}
	for _, tt := range tests {
		t.Run(tt.driver, func(t *testing.T) {
			path := filepath.Join("..", "build", tt.dir, "libcuda.so.1")
			_, err := os.Stat(path)
			e2eenv.Need(t, err == nil, "NVIDIA's libcuda.so.1 is not in build/"+tt.dir+" (run make nvidia-libs)")
			exports := realExports(t, path)
			var unhooked, covered []string
			for name := range exports {
				if fam, ok := FamilyOf(name); ok {
					if _, _, row := Lookup(name); !row {
						t.Errorf("driver %s exports %s (%s), which has no row in the symbol table", tt.driver, name, fam)
					}
					covered = append(covered, name)
				}
				if Unhooked(name) {
					unhooked = append(unhooked, name)
				}
			}
			sort.Strings(unhooked)
			if !reflect.DeepEqual(unhooked, tt.unhooked) {
				t.Errorf("driver %s: unhooked memory and context calls\n got %v\nwant %v", tt.driver, unhooked, tt.unhooked)
			}
			for _, r := range tt.rows {
				if !exports[r] {
					t.Errorf("driver %s does not export %s: is this libcuda %s?", tt.driver, r, tt.driver)
				}
			}
			if len(covered) < 60 {
				t.Errorf("only %d exports of the table's families found: is this libcuda?", len(covered))
			}
			t.Logf("driver %s: %d exports of the table's families, %d memory and context calls without a row",
				tt.driver, len(covered), len(unhooked))
		})
	}
}

// Unhooked tells the calls the table should trace from those it leaves
// untraced on purpose and from calls outside the memory and context
// families.
func TestUnhookedSeparatesQuietCalls(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"cuMemAlloc_v2", false},         // a row
		{"cuMemAlloc_v3", true},          // a newer variant of a family
		{"cuGreenCtxCreate", false},      // a row
		{"cuGreenCtxCreate_v2", true},    // a newer variant
		{"cuGreenCtxSomethingNew", true}, // a context call nobody classified
		{"cuMulticastCreate", true},      // takes memory, no row
		{"cuMemcpyDtoH_v2_ptds", false},  // a copy
		{"cuMemsetD8Async_ptsz", false},  // a write
		{"cuMemGetInfo_v2", false},       // a query
		{"cuCtxGetDevice", false},        // a query
		{"cuCtxSetLimit", true},          // can allocate (stack, heap)
		{"cuCtxSetCacheConfig", false},   // a setting
		{"cuLaunchKernel", false},        // not a memory or context call
		{"cuStreamCreate", false},        // not a memory or context call
	}
	for _, tt := range tests {
		if got := Unhooked(tt.name); got != tt.want {
			t.Errorf("Unhooked(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLookupResult(t *testing.T) {
	tests := []struct {
		code    int32
		name    string
		meaning Meaning
	}{
		{2, "CUDA_ERROR_OUT_OF_MEMORY", MeaningResource},
		{205, "CUDA_ERROR_MAP_FAILED", MeaningMapping},
		{100, "CUDA_ERROR_NO_DEVICE", MeaningNotMemory},
		{700, "CUDA_ERROR_ILLEGAL_ADDRESS", MeaningSticky},
		{1, "CUDA_ERROR_INVALID_VALUE", MeaningArgument},
		{12345, "CUDA_ERROR_12345", MeaningUnknown},
	}
	for _, tt := range tests {
		r := LookupResult(tt.code)
		if r.Name != tt.name || r.Meaning != tt.meaning {
			t.Errorf("LookupResult(%d) = %s %s, want %s %s", tt.code, r.Name, r.Meaning, tt.name, tt.meaning)
		}
	}
	seen := map[int32]bool{}
	for _, r := range Results {
		if seen[r.Code] {
			t.Errorf("code %d listed twice", r.Code)
		}
		seen[r.Code] = true
	}
}

func TestDecodeDerivedSizes(t *testing.T) {
	le := func(b []byte, off int, v uint64, w int) {
		for i := 0; i < w; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	tests := []struct {
		sym  string
		raw  func() Raw
		want uint64
	}{
		{"cuMemAlloc_v2", func() Raw { return Raw{Args: [6]uint64{0, 4096}, OutAOK: true} }, 4096},
		{"cuMemAlloc", func() Raw { return Raw{Args: [6]uint64{0, 0xdead00000100}, OutAOK: true} }, 0x100},
		{"cuMemAllocPitch_v2", func() Raw {
			r := Raw{Args: [6]uint64{0, 0, 1000, 10}, OutAOK: true, OutBOK: true}
			le(r.OutB[:], 0, 1024, 8)
			return r
		}, 10240},
		{"cuArrayCreate_v2", func() Raw {
			r := Raw{InOK: true}
			le(r.In[:], 0, 100, 8)
			le(r.In[:], 8, 10, 8)
			le(r.In[:], 16, 0x20, 4) // FLOAT
			le(r.In[:], 20, 2, 4)
			return r
		}, 100 * 10 * 4 * 2},
		{"cuArray3DCreate", func() Raw {
			r := Raw{InOK: true}
			le(r.In[:], 0, 8, 4)
			le(r.In[:], 4, 0, 4) // a 1D array has height 0
			le(r.In[:], 8, 2, 4)
			le(r.In[:], 12, 0x01, 4)
			le(r.In[:], 16, 4, 4)
			return r
		}, 8 * 1 * 2 * 4},
		{"cuMipmappedArrayCreate", func() Raw {
			r := Raw{Args: [6]uint64{0, 0, 3}, InOK: true}
			le(r.In[:], 0, 8, 8)
			le(r.In[:], 8, 8, 8)
			le(r.In[:], 24, 0x01, 4)
			le(r.In[:], 28, 1, 4)
			return r
		}, 64 + 16 + 4},
	}
	for _, tt := range tests {
		s, _, _ := Lookup(tt.sym)
		raw := tt.raw()
		f := s.Decode(&raw)
		if f.Has&FieldSize == 0 || f.Size != tt.want {
			t.Errorf("%s size = %d (has %v), want %d", tt.sym, f.Size, f.Has&FieldSize != 0, tt.want)
		}
	}
	// A failed call wrote no out parameter: its pointer is not invented.
	s, _, _ := Lookup("cuMemAlloc_v2")
	raw := Raw{Args: [6]uint64{0, 4096}}
	if f := s.Decode(&raw); f.Has&FieldPtr != 0 {
		t.Error("pointer decoded from a failed call")
	}
}

// Exports and imports are properties of the table, so the analysis never
// names a symbol: the exporting calls name a device allocation or a
// physical handle by Target and carry their export bytes in Key; the
// importing calls create a mapping keyed by those bytes.
func TestExportImportRows(t *testing.T) {
	wantExports := map[string][]Resource{
		"cuIpcGetMemHandle":      {ResDevPtr, ResMemHandle},
		"cuMemPoolExportPointer": {ResDevPtr, ResMemHandle},
	}
	wantImports := map[string]bool{"cuIpcOpenMemHandle": true, "cuIpcOpenMemHandle_v2": true, "cuMemPoolImportPointer": true}
	for _, s := range Symbols {
		want := wantExports[s.Name]
		if len(s.Exports) != len(want) {
			t.Errorf("%s exports %v, want %v", s.Name, s.Exports, want)
		} else {
			for i := range want {
				if s.Exports[i] != want[i] {
					t.Errorf("%s exports %v, want %v", s.Name, s.Exports, want)
				}
			}
		}
		if len(s.Exports) > 0 && (s.Key.Src == SrcNone || s.Target.Src == SrcNone || s.Creates != ResNone || s.Op != OpMapping) {
			t.Errorf("%s exports but is not a mapping call with a key and a target that creates nothing", s.Name)
		}
		if s.Imports != wantImports[s.Name] {
			t.Errorf("%s Imports = %v, want %v", s.Name, s.Imports, wantImports[s.Name])
		}
		if s.Imports && (s.Key.Src == SrcNone || s.Creates == ResNone || s.Creates.View() != ViewBAR1) {
			t.Errorf("%s imports but has no key or creates no aperture mapping", s.Name)
		}
	}
}

// LookupResult's index agrees with the table row for row.
func TestLookupResultIndex(t *testing.T) {
	for _, r := range Results {
		if got := LookupResult(r.Code); got != r {
			t.Errorf("LookupResult(%d) = %+v, want %+v", r.Code, got, r)
		}
	}
	if got := LookupResult(-5); got.Name != "CUDA_ERROR_-5" || got.Meaning != MeaningUnknown {
		t.Errorf("LookupResult(-5) = %+v", got)
	}
}

// Every array argument the table names is captured by the generic array
// capture, within the probes' buffer, with its count as the row's Count.
func TestArrayRows(t *testing.T) {
	want := map[string]bool{"cuMemSetAccess": true, "cuMemMapArrayAsync": true, "cuGraphicsMapResources": true}
	for _, s := range Symbols {
		a := s.Array
		if a.Len == 0 {
			if want[s.Family] {
				t.Errorf("%s: array argument not captured", s.Name)
			}
			continue
		}
		if !want[s.Family] {
			t.Errorf("%s: unexpected array capture", s.Name)
		}
		if a.Max == 0 || a.Max > arrayMax || int(a.Max)*int(a.Len) > len(Raw{}.Arr) {
			t.Errorf("%s: %d elements of %d bytes do not fit the probes' %d-byte buffer", s.Name, a.Max, a.Len, len(Raw{}.Arr))
		}
		if a.Count.Src != SrcArg || s.Count != a.Count {
			t.Errorf("%s: count %+v, row Count %+v", s.Name, a.Count, s.Count)
		}
		if a.Arg < 0 || a.Arg > 5 {
			t.Errorf("%s: array pointer in argument %d", s.Name, a.Arg)
		}
		for _, l := range []Loc{s.Size, s.Flags, s.Ptr, s.Target, s.Device, s.Peer, s.Key} {
			if l.Src == SrcArray && int(l.Index)+int(l.Width) > int(a.Len) {
				t.Errorf("%s: field at %+v lies outside the first element (%d bytes)", s.Name, l, a.Len)
			}
		}
	}
}

// accessDescs lays out CUmemAccessDesc elements as the caller does.
func accessDescs(r *Raw, descs ...[3]uint32) {
	for i, d := range descs {
		for j, v := range d {
			binary.LittleEndian.PutUint32(r.Arr[i*12+j*4:], v)
		}
	}
}

func TestDecodeArrays(t *testing.T) {
	owner0peer1 := func() Raw {
		r := Raw{Args: [6]uint64{0x7f0000000000, 64 << 20, 0x1000, 2}, ArrN: 2, ArrOK: true}
		accessDescs(&r, [3]uint32{1, 0, 3}, [3]uint32{1, 1, 3})
		return r
	}
	tests := []struct {
		name   string
		sym    string
		raw    func() Raw
		has    bool
		items  uint32
		grants []Grant
		peer   int64 // -1: no Peer field
	}{
		{"owner first, then a peer", "cuMemSetAccess", owner0peer1, true, 2,
			[]Grant{{Type: LocationDevice, Device: 0, Flags: 3}, {Type: LocationDevice, Device: 1, Flags: 3}}, 0},
		{"descriptors could not be read", "cuMemSetAccess", func() Raw {
			r := owner0peer1()
			r.ArrOK = false
			return r
		}, false, 0, nil, -1},
		{"no descriptor", "cuMemSetAccess", func() Raw {
			return Raw{Args: [6]uint64{0x7f0000000000, 64 << 20, 0, 0}, ArrOK: true}
		}, true, 0, nil, -1},
		{"a count beyond the buffer keeps what fits", "cuMemSetAccess", func() Raw {
			r := Raw{Args: [6]uint64{0, 0, 0x1000, 100}, ArrN: 200, ArrOK: true}
			accessDescs(&r, [3]uint32{1, 5, 1})
			return r
		}, true, 8, nil, 5},
		{"map infos are counted", "cuMemMapArrayAsync", func() Raw {
			return Raw{Args: [6]uint64{0x1000, 3}, ArrN: 1, ArrOK: true}
		}, true, 1, nil, -1},
		{"graphics resources are counted", "cuGraphicsMapResources_ptsz", func() Raw {
			return Raw{Args: [6]uint64{2, 0x2000}, ArrN: 2, ArrOK: true}
		}, true, 2, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := Lookup(tt.sym)
			raw := tt.raw()
			f := s.Decode(&raw)
			if (f.Has&FieldItems != 0) != tt.has || f.Items != tt.items {
				t.Fatalf("items = %d (has %v), want %d (has %v)", f.Items, f.Has&FieldItems != 0, tt.items, tt.has)
			}
			if tt.grants != nil && !reflect.DeepEqual(f.Grants, tt.grants) {
				t.Errorf("grants = %+v, want %+v", f.Grants, tt.grants)
			}
			if s.Array.Elem != ElemAccessDesc && f.Grants != nil {
				t.Errorf("grants decoded from opaque elements: %+v", f.Grants)
			}
			if gotPeer := f.Has&FieldPeer != 0; gotPeer != (tt.peer >= 0) || (gotPeer && int64(f.Peer) != tt.peer) {
				t.Errorf("peer = %d (has %v), want %d", f.Peer, gotPeer, tt.peer)
			}
			// The true count is the argument, even when fewer were read.
			if f.Has&FieldCount == 0 || f.Count != raw.Args[s.Array.Count.Index] {
				t.Errorf("count = %d (has %v), want argument %d", f.Count, f.Has&FieldCount != 0, raw.Args[s.Array.Count.Index])
			}
		})
	}
}
