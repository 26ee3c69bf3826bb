package cuda

import "strings"

// tracedPrefixes are the name prefixes of the driver's memory and context
// families: the calls that can allocate, map, register, import, export or
// release memory, and create, retain, select or destroy contexts. An
// export with one of them that has no row and is not listed in quiet is a
// call the table should know and does not.
var tracedPrefixes = []string{
	"cuMem", "cuArray", "cuMipmappedArray", "cuIpc", "cuMulticast",
	"cuImportExternalMemory", "cuExternalMemory", "cuDestroyExternalMemory",
	"cuGraphics", "cuCtx", "cuGreenCtx", "cuDevicePrimaryCtx",
}

// quietCall is a name (with its _vN, _ptsz and _ptds variants) or, with
// prefix, every name that begins with it, of the memory and context
// families that creates, sizes and releases nothing: the table leaves it
// untraced on purpose, and why says so.
type quietCall struct {
	name   string
	prefix bool
	why    string
}

// quiet lists the memory and context calls the table does not trace
// because they neither take nor give back memory or contexts.
var quiet = []quietCall{
	{name: "cuMemcpy", prefix: true, why: "copies between memory that exists"},
	{name: "cuMemset", prefix: true, why: "writes memory that exists"},
	{name: "cuMemGetInfo", why: "a query"},
	{name: "cuMemGetAddressRange", why: "a query"},
	{name: "cuMemGetAccess", why: "a query"},
	{name: "cuMemGetAllocationGranularity", why: "a query"},
	{name: "cuMemGetAllocationPropertiesFromHandle", why: "a query"},
	{name: "cuMemGetAttribute", why: "a query"},
	{name: "cuMemRangeGetAttribute", why: "a query"},
	{name: "cuMemRangeGetAttributes", why: "a query"},
	{name: "cuMemHostGetFlags", why: "a query"},
	{name: "cuMemPoolGetAccess", why: "a query"},
	{name: "cuMemPoolGetAttribute", why: "a query"},
	{name: "cuMemPoolSetAttribute", why: "sets a pool's thresholds; the pool's allocations are traced"},
	{name: "cuMemAdvise", why: "advice on managed memory already allocated"},
	{name: "cuMemPrefetchAsync", why: "moves managed memory already allocated"},
	{name: "cuArrayGetDescriptor", why: "a query"},
	{name: "cuArray3DGetDescriptor", why: "a query"},
	{name: "cuArrayGetMemoryRequirements", why: "a query"},
	{name: "cuArrayGetPlane", why: "a query"},
	{name: "cuArrayGetSparseProperties", why: "a query"},
	{name: "cuMipmappedArrayGetLevel", why: "a query"},
	{name: "cuMipmappedArrayGetMemoryRequirements", why: "a query"},
	{name: "cuMipmappedArrayGetSparseProperties", why: "a query"},
	{name: "cuMulticastGetGranularity", why: "a query"},
	{name: "cuIpcGetEventHandle", why: "an event, not memory"},
	{name: "cuIpcOpenEventHandle", why: "an event, not memory"},
	{name: "cuGraphicsResourceGetMapped", prefix: true, why: "a query of a resource cuGraphicsMapResources mapped"},
	{name: "cuGraphicsResourceSetMapFlags", why: "a setting for the next map, which is traced"},
	{name: "cuGraphicsSubResourceGetMappedArray", why: "a query of a resource cuGraphicsMapResources mapped"},
	{name: "cuCtxGet", prefix: true, why: "a query"},
	{name: "cuCtxSetCacheConfig", why: "a setting"},
	{name: "cuCtxSetSharedMemConfig", why: "a setting"},
	{name: "cuCtxSetFlags", why: "a setting"},
	{name: "cuCtxSynchronize", why: "waits for work"},
	{name: "cuCtxResetPersistingL2Cache", why: "resets a cache"},
	{name: "cuDevicePrimaryCtxGetState", why: "a query"},
	{name: "cuDevicePrimaryCtxSetFlags", why: "a setting"},
	{name: "cuGreenCtxGetDevResource", why: "a query"},
	{name: "cuGreenCtxRecordEvent", why: "records an event"},
	{name: "cuGreenCtxWaitEvent", why: "waits for an event"},
}

// quietWhy returns why an export of the memory and context families is
// deliberately left untraced, or "" when it is not.
func quietWhy(export string) string {
	for _, q := range quiet {
		if !strings.HasPrefix(export, q.name) {
			continue
		}
		if q.prefix || variantSuffix.MatchString(export[len(q.name):]) {
			return q.why
		}
	}
	return ""
}

// Unhooked reports whether an exported libcuda name is a call the symbol
// table should trace and has no row for: a variant of a family of the
// table (a newer _vN or _ptsz), or a call of the memory and context
// families that is not on the table's list of calls that take and give
// back nothing. It is what COVERAGE lists as exported but not attached.
func Unhooked(export string) bool {
	if _, _, ok := Lookup(export); ok {
		return false
	}
	if _, ok := FamilyOf(export); ok {
		return true
	}
	for _, p := range tracedPrefixes {
		if strings.HasPrefix(export, p) {
			return quietWhy(export) == ""
		}
	}
	return false
}
