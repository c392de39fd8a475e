// Haystack filler: varied English-like sentences drawn from word lists and sentence templates, so
// that a haystack is not a short pattern repeated (RULER's "The grass is green." noise is) and a
// model cannot skip it by rote. About 10^12 distinct sentences; roughly 10-16 tokens each.
// Also the TaskRng (tasks.h) every generator draws from.
#include <array>
#include <string>
#include <string_view>

#include "eval/tasks_internal.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/util/error.h"

namespace snapkv::eval {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

constexpr std::array kAdjectives = {
    "quiet",   "heavy",  "bright",  "old",    "young",    "small",  "large",   "gentle",
    "narrow",  "broad",  "silent",  "noisy",  "golden",   "silver", "dusty",   "clean",
    "warm",    "cold",   "early",   "late",   "careful",  "clever", "patient", "tired",
    "busy",    "simple", "strange", "famous", "hidden",   "empty",  "crowded", "wooden",
    "green",   "blue",   "red",     "yellow", "brown",    "white",  "dark",    "pale",
    "rough",   "smooth", "sharp",   "soft",   "strong",   "weak",   "rich",    "poor",
    "ancient", "modern", "distant", "nearby", "friendly", "lonely", "proud",   "humble",
    "curious", "eager",  "calm",    "brave",  "wild",     "tame",   "bitter",  "sweet"};

constexpr std::array kPeople = {
    "farmer",  "teacher",  "sailor",  "baker",  "doctor",   "painter",  "merchant", "student",
    "soldier", "driver",   "writer",  "singer", "hunter",   "weaver",   "miller",   "porter",
    "captain", "gardener", "builder", "fisher", "traveler", "scholar",  "child",    "neighbor",
    "clerk",   "cook",     "monk",    "judge",  "pilot",    "shepherd", "tailor",   "smith"};

constexpr std::array kThings = {
    "basket",  "lantern", "letter", "book",  "map",   "coat",   "barrel", "bottle",
    "blanket", "box",     "candle", "chair", "clock", "drum",   "flag",   "hammer",
    "key",     "ladder",  "mirror", "net",   "pot",   "rope",   "sack",   "shovel",
    "stone",   "table",   "ticket", "wagon", "wheel", "window", "bell",   "cup",
    "horse",   "goat",    "dog",    "cat",   "bird",  "fish",   "apple",  "bread",
    "cheese",  "song",    "story",  "coin",  "shirt", "boot",   "lamp",   "bag"};

constexpr std::array kPlaces = {
    "bridge",  "market", "harbor", "village", "river",  "forest", "garden", "station",
    "library", "church", "castle", "hill",    "valley", "field",  "road",   "square",
    "kitchen", "school", "tower",  "mill",    "farm",   "lake",   "island", "mountain",
    "shop",    "street", "beach",  "barn",    "cellar", "hall",   "well",   "camp"};

constexpr std::array kVerbsPast = {
    "carried", "found",   "painted",   "sold",     "bought",   "lost",      "moved",
    "cleaned", "opened",  "closed",    "watched",  "followed", "noticed",   "repaired",
    "counted", "dropped", "lifted",    "pulled",   "pushed",   "wrapped",   "hid",
    "showed",  "gave",    "took",      "borrowed", "returned", "described", "remembered",
    "admired", "ignored", "collected", "packed"};

constexpr std::array kVerbsIntrans = {
    "waited", "walked", "slept", "laughed", "worked", "rested", "sang",    "listened",
    "stayed", "danced", "wrote", "cooked",  "prayed", "played", "studied", "wandered"};

constexpr std::array kAdverbs = {
    "slowly", "quickly", "quietly", "happily", "carefully", "suddenly",  "gladly",  "rarely",
    "often",  "calmly",  "boldly",  "gently",  "loudly",    "patiently", "proudly", "easily"};

constexpr std::array kPrepositions = {"near",  "behind", "across", "inside", "beside", "under",
                                      "above", "past",   "around", "toward", "beyond", "along"};

constexpr std::array kTimes = {
    "in the morning",      "at noon",     "before dawn",      "after dinner",
    "on Monday",           "on Friday",   "last winter",      "every summer",
    "in the evening",      "at midnight", "during the storm", "after the rain",
    "before the festival", "that spring", "on a windy day",   "late at night"};

constexpr std::array kWeather = {"rain",  "wind", "snow",   "fog",  "sun",  "frost",
                                 "storm", "heat", "clouds", "mist", "hail", "thunder"};

template <size_t N>
std::string_view pick(TaskRng& rng, const std::array<const char*, N>& words) {
  return words[rng.below(N)];
}

std::string article_for(std::string_view word) {
  const char c = word.empty() ? 'x' : word[0];
  const bool vowel = c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
  return vowel ? "an" : "a";
}

std::string plural(const std::string& noun) {
  const char last = noun.empty() ? ' ' : noun.back();
  return noun + ((last == 'x' || last == 'h' || last == 's') ? "es" : "s");
}

std::string capitalize(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

}  // namespace

TaskRng::TaskRng(uint64_t seed) {
  uint64_t state = seed;
  for (auto& word : s_) word = splitmix64(state);
}

uint64_t TaskRng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t TaskRng::below(uint64_t n) {
  SNAPKV_CHECK(n > 0);
  // Rejection sampling: accept only draws below the largest multiple of n (unbiased).
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = next();
    if (x < limit) return x % n;
  }
}

double TaskRng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

uint64_t TaskRng::digits(size_t n_digits) {
  SNAPKV_CHECK(n_digits >= 1 && n_digits <= 18);
  uint64_t low = 1;
  for (size_t i = 1; i < n_digits; ++i) low *= 10;
  return low + below(9 * low);
}

std::string filler_sentence(TaskRng& rng) {
  const std::string adj{pick(rng, kAdjectives)};
  const std::string adj2{pick(rng, kAdjectives)};
  const std::string person{pick(rng, kPeople)};
  const std::string person2{pick(rng, kPeople)};
  const std::string thing{pick(rng, kThings)};
  const std::string place{pick(rng, kPlaces)};
  const std::string verb{pick(rng, kVerbsPast)};
  const std::string intrans{pick(rng, kVerbsIntrans)};
  const std::string adverb{pick(rng, kAdverbs)};
  const std::string prep{pick(rng, kPrepositions)};
  const std::string when{pick(rng, kTimes)};
  const std::string weather{pick(rng, kWeather)};
  switch (rng.below(12)) {
    case 0:
      return "The " + adj + " " + person + " " + verb + " " + article_for(adj2) + " " + adj2 + " " +
             thing + " " + prep + " the " + place + ".";
    case 1:
      return capitalize(when) + ", the " + person + " " + intrans + " " + adverb + " " + prep +
             " the " + adj + " " + place + ".";
    case 2:
      return "Nobody " + verb + " the " + thing + " that the " + person + " left " + prep +
             " the " + place + ".";
    case 3:
      return "The " + weather + " came " + when + ", so the " + person + " " + intrans +
             " in the " + place + ".";
    case 4:
      return "A " + person + " and " + article_for(adj) + " " + adj + " " + person2 + " " + verb +
             " " + std::to_string(2 + rng.below(9)) + " " + plural(thing) + " " + prep + " the " +
             place + ".";
    case 5:
      return "Everyone said the " + place + " was " + adj + ", but the " + person +
             " thought it was " + adj2 + ".";
    case 6:
      return "The " + person + " " + adverb + " " + verb + " the " + adj + " " + thing +
             " and then " + intrans + ".";
    case 7:
      return "Near the " + place + " stood " + article_for(adj) + " " + adj + " " + thing +
             " that nobody had " + verb + " since " + when + ".";
    case 8:
      return "If the " + weather + " stays " + when + ", the " + person + " will not go to the " +
             place + ".";
    case 9:
      return "My " + person + " " + verb + " " + article_for(adj) + " " + adj + " " + thing +
             " from the " + person2 + " at the " + place + ".";
    case 10:
      return "There was " + article_for(adj) + " " + adj + " " + thing + " in the " + place +
             ", and the " + person + " " + intrans + " beside it.";
    default:
      return "After the " + weather + ", the " + adj + " " + person2 + " " + verb + " every " +
             thing + " " + prep + " the " + place + " " + adverb + ".";
  }
}

// Key words for needles ("quiet-river"): adjective-noun pairs from the same lists.
std::string needle_key(TaskRng& rng) {
  const bool use_place = rng.below(2) == 0;
  const std::string noun =
      use_place ? std::string{pick(rng, kPlaces)} : std::string{pick(rng, kThings)};
  return std::string{pick(rng, kAdjectives)} + "-" + noun;
}

}  // namespace snapkv::eval
