// Unit tests for the ITN module: language selection, pass-through of other
// languages, edge cases (empty, already-written text, mixed text, UTF-8
// safety, very long input, random bytes), and must-not-change phrases.
#include "itn.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

using qasr::itn::Language;
using qasr::itn::normalize;

TEST(ItnLanguage, FromName) {
    EXPECT_EQ(qasr::itn::language_from_name("English"), Language::English);
    EXPECT_EQ(qasr::itn::language_from_name("en"), Language::English);
    EXPECT_EQ(qasr::itn::language_from_name("EN-us"), Language::English);
    EXPECT_EQ(qasr::itn::language_from_name("Chinese"), Language::Chinese);
    EXPECT_EQ(qasr::itn::language_from_name("zh"), Language::Chinese);
    EXPECT_EQ(qasr::itn::language_from_name("zh_CN"), Language::Chinese);
    EXPECT_EQ(qasr::itn::language_from_name("Cantonese"), Language::Chinese);
    EXPECT_EQ(qasr::itn::language_from_name("French"), Language::Other);
    EXPECT_EQ(qasr::itn::language_from_name(""), Language::Other);
}

TEST(ItnBasics, EmptyAndOther) {
    EXPECT_EQ(normalize("", Language::English), "");
    EXPECT_EQ(normalize("", Language::Chinese), "");
    EXPECT_EQ(normalize("twenty five dollars", Language::Other), "twenty five dollars");
    EXPECT_EQ(normalize("vingt-cinq", Language::Other), "vingt-cinq");
}

TEST(ItnEnglish, Classes) {
    EXPECT_EQ(normalize("twenty five dollars", Language::English), "$25");
    EXPECT_EQ(normalize("it costs twenty five dollars.", Language::English), "it costs $25.");
    EXPECT_EQ(normalize("march third twenty twenty", Language::English), "march 3 2020");
    EXPECT_EQ(normalize("two hundred and fifty four", Language::English), "254");
    EXPECT_EQ(normalize("eighteen point six percent", Language::English), "18.6 %");
    EXPECT_EQ(normalize("two thirty p m", Language::English), "02:30 p.m.");
    EXPECT_EQ(normalize("the twenty third", Language::English), "the 23rd");
    EXPECT_EQ(normalize("twenty-five people", Language::English), "25 people");
}

TEST(ItnEnglish, MoreClasses) {
    EXPECT_EQ(normalize("two thirds of the people", Language::English), "2/3 of the people");
    EXPECT_EQ(normalize("three and a half", Language::English), "3 1/2");
    EXPECT_EQ(normalize("the c p u is hot", Language::English), "the CPU is hot");
    EXPECT_EQ(normalize("quarter till two", Language::English), "01:45");
    EXPECT_EQ(normalize("fourteen hundred hours", Language::English), "14:00");
    EXPECT_EQ(normalize("john dot smith at gmail dot com", Language::English), "john.smith@gmail.com");
    EXPECT_EQ(normalize("call five five five one two three four", Language::English), "call 5551234");
    EXPECT_EQ(normalize("nineteen eighties", Language::English), "1980s");
    EXPECT_EQ(normalize("Mister Smith", Language::English), "Mr. Smith");
    EXPECT_EQ(normalize("eight hundred kilowatts", Language::English), "800 kW");
}

TEST(ItnEnglish, MustNotChange) {
    for (const char* s : {"one of the best", "wait a second", "a hundred percent sure", "at first I was sure",
                          "the second time", "she misses him", "we may go", "one", "Yahoo!", "x"}) {
        EXPECT_EQ(normalize(s, Language::English), s) << s;
    }
}

TEST(ItnEnglish, AlreadyWritten) {
    for (const char* s : {"$25", "2020", "50%", "july 25 2012", "02:00 p.m.", "a@b.com", "x86", "3rd",
                          "I paid $4.69 for 200 km/h", "mr. smith"}) {
        EXPECT_EQ(normalize(s, Language::English), s) << s;
    }
}

TEST(ItnEnglish, KeepsSpacingAndPunctuation) {
    EXPECT_EQ(normalize("  hello,   twenty  one!  ", Language::English), "  hello,   21!  ");
    EXPECT_EQ(normalize("one, two, three", Language::English), "one, two, three");
    EXPECT_EQ(normalize("line one\ntwenty two", Language::English), "line one\n22");
}

TEST(ItnChinese, Classes) {
    EXPECT_EQ(normalize("一百二十三", Language::Chinese), "123");
    EXPECT_EQ(normalize("百分之五十", Language::Chinese), "50%");
    EXPECT_EQ(normalize("二零二零年三月五日", Language::Chinese), "2020年3月5日");
    EXPECT_EQ(normalize("十三点零五分", Language::Chinese), "13:05");
    EXPECT_EQ(normalize("五分之二", Language::Chinese), "2/5");
    EXPECT_EQ(normalize("五千元", Language::Chinese), "¥5000");
    EXPECT_EQ(normalize("他今年二十岁", Language::Chinese), "他今年20岁");
}

TEST(ItnChinese, MoreClasses) {
    EXPECT_EQ(normalize("五时十五分", Language::Chinese), "05:15");
    EXPECT_EQ(normalize("等五分钟", Language::Chinese), "等5分钟");
    EXPECT_EQ(normalize("一千港元", Language::Chinese), "HKD$1000");
    EXPECT_EQ(normalize("负三分之一", Language::Chinese), "-1/3");
    EXPECT_EQ(normalize("第一百零一", Language::Chinese), "第101");
    EXPECT_EQ(normalize("一億零一百萬", Language::Chinese), "101,000,000");
    EXPECT_EQ(normalize("全球定位系统", Language::Chinese), "GPS");
}

TEST(ItnChinese, MustNotChange) {
    for (const char* s : {"我们一起去", "等一会儿", "一点儿", "十分好", "三心二意", "一五一十", "有一点累",
                          "第一次", "一个人", "万一下雨", "三四十个人"}) {
        EXPECT_EQ(normalize(s, Language::Chinese), s) << s;
    }
}

TEST(ItnChinese, AlreadyWrittenAndMixed) {
    for (const char* s : {"50%", "2020年3月5日", "US$1000", "第500", "hello world 123"}) {
        EXPECT_EQ(normalize(s, Language::Chinese), s) << s;
    }
    EXPECT_EQ(normalize("价格是一千五百元, ok", Language::Chinese), "价格是¥1500, ok");
}

TEST(ItnRobustness, Utf8AndInvalidBytes) {
    std::string bad = "twenty \xff\xfe five \xe4\xb8 dollars";
    EXPECT_NO_THROW(normalize(bad, Language::English));
    EXPECT_NO_THROW(normalize(bad, Language::Chinese));
    EXPECT_EQ(normalize("café twenty one", Language::English), "café 21");
    std::string zh_bad = "一百\xe4\xb8二十";
    EXPECT_NO_THROW(normalize(zh_bad, Language::Chinese));
}

TEST(ItnRobustness, VeryLongInput) {
    std::string en;
    for (int i = 0; i < 20000; ++i) en += "twenty five dollars and one hundred people ";
    std::string out = normalize(en, Language::English);
    EXPECT_NE(out.find("$25"), std::string::npos);
    std::string zh;
    for (int i = 0; i < 20000; ++i) zh += "一百二十三个人，";
    EXPECT_NE(normalize(zh, Language::Chinese).find("123个人"), std::string::npos);
    // A very long run of number words must not overflow.
    std::string big;
    for (int i = 0; i < 5000; ++i) big += "nine hundred ninety nine quintillion ";
    EXPECT_NO_THROW(normalize(big, Language::English));
    std::string zbig(30000, 'x');
    std::string zdigits;
    for (int i = 0; i < 5000; ++i) zdigits += "九千九百九十九亿";
    EXPECT_NO_THROW(normalize(zdigits, Language::Chinese));
}

TEST(ItnRobustness, ThreadSafe) {
    const std::vector<std::pair<std::string, Language>> inputs = {
        {"twenty five dollars and one hundred people", Language::English},
        {"july twenty fifth twenty twelve at two p m", Language::English},
        {"一百二十三个人，百分之五十，二零二零年三月五日", Language::Chinese},
    };
    std::vector<std::string> expected;
    for (const auto& [s, l] : inputs) expected.push_back(normalize(s, l));
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int k = 0; k < 2000; ++k)
                for (size_t i = 0; i < inputs.size(); ++i)
                    if (normalize(inputs[i].first, inputs[i].second) != expected[i]) ++mismatches[static_cast<size_t>(t)];
        });
    }
    for (auto& th : threads) th.join();
    for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ItnRobustness, RandomBytesNoCrash) {
    std::mt19937 rng(12345);
    const std::string words[] = {"one", "two", "twenty", "hundred", "thousand", "point", "dollars", "at", "dot",
                                 "p", "m", "o", "double", "minus", "percent", "the", "of", "july", "first",
                                 "一", "十", "百", "万", "亿", "点", "分", "之", "第", "负", "年", "月", "元", "两", "零"};
    for (int iter = 0; iter < 20000; ++iter) {
        std::string s;
        int len = static_cast<int>(rng() % 40);
        for (int k = 0; k < len; ++k) {
            unsigned r = rng() % 4;
            if (r == 0) s += static_cast<char>(rng() % 256);
            else if (r == 1) s += ' ';
            else s += words[rng() % (sizeof(words) / sizeof(words[0]))];
        }
        EXPECT_NO_THROW(normalize(s, Language::English));
        EXPECT_NO_THROW(normalize(s, Language::Chinese));
    }
}
